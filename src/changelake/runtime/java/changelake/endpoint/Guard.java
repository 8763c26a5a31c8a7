package changelake.endpoint;

import java.io.IOException;
import java.io.Serializable;
import java.lang.reflect.Method;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.Locale;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.CurrentUserContext;
import org.apache.spark.sql.catalyst.analysis.FunctionRegistry$;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.expressions.UserDefinedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connector.catalog.CatalogPlugin;
import org.apache.spark.sql.connector.catalog.Identifier;
import scala.Function1;
import scala.Option;
import scala.Tuple2;
import scala.collection.Iterator;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * A Spark session extension ({@code spark.sql.extensions=changelake.endpoint.Guard}) that checks every
 * statement a Thrift client sends to the changelake SQL endpoint, after analysis and before it runs.
 *
 * <p>An allowlist: a statement runs only if every node of its analysed plan, and every expression in it, is one
 * this class names for the user's role. Everything else is refused, whatever it is, so a Spark feature nobody
 * thought of is refused too (docs/sql-endpoint.md, "Security").
 *
 * <ul>
 *   <li>Both roles: queries (the relational operators of {@link #QUERY}) over changelake's tables (a
 *       {@code DataSourceV2Relation} of changelake's catalog), the server's {@code global_temp} views and
 *       managed tables of the metastore whose provider is on {@link #PROVIDERS}; Spark's built-in functions but
 *       {@link #DENIED_FUNCTIONS} (no user-defined function); {@code SHOW},
 *       {@code DESCRIBE}, {@code EXPLAIN}, {@code USE}, reading settings, {@code RESET} and setting
 *       {@link #READ_SETTINGS}.
 *   <li>The owner ({@code role=owner} in the secrets file: dbt's login) besides: what dbt-spark's
 *       materializations send ({@link #OWNER_COMMANDS}): managed tables created, filled and dropped, views,
 *       schemas without a location, {@code ANALYZE TABLE}, and {@link #OWNER_SETTINGS}.
 * </ul>
 *
 * <p>A statement is a Thrift client's when Spark's Thrift server has set the session's user
 * ({@code CurrentUserContext}); statements of the server itself (the views it registers) and of Spark
 * Connect clients (who hold the endpoint's token, so are its owner) have none and pass.
 *
 * <p>With the system property {@code changelake.endpoint.guard.record} naming a file, every checked statement
 * appends a line to it: role, the refusal or {@code -}, and the plan's node kinds (tests record what dbt sends).
 */
public final class Guard extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> implements Serializable {
  /** Relational operators of a query (the relations are checked one by one, below). */
  static final Set<String> QUERY = set(
      "Project", "Filter", "Aggregate", "Join", "LateralJoin", "Sort", "GlobalLimit", "LocalLimit", "Offset",
      "Tail", "Union", "Intersect", "Except", "Distinct", "Deduplicate", "Window", "Expand", "Generate",
      "SubqueryAlias", "Subquery", "OneRowRelation", "LocalRelation", "Range", "Sample", "WithCTE",
      "CTERelationDef", "CTERelationRef", "UnionLoop", "UnionLoopRef", "RepartitionByExpression",
      "Repartition", "RebalancePartitions", "ResolvedHint", "Pivot", "WithWindowDefinition",
      // how the Thrift server collects every statement's result (Dataset.collect): no SQL makes one
      "DeserializeToObject",
      // what a command names (a table, a view, a namespace): resolved references, read nothing
      "ResolvedTable", "ResolvedPersistentView", "ResolvedTempView", "ResolvedNamespace", "ResolvedIdentifier",
      "ResolvedNonPersistentFunc", "ResolvedPersistentFunc");
  /** Commands of both roles: they read the catalogs' metadata or the session's settings. */
  static final Set<String> READ_COMMANDS = set(
      "ShowTablesCommand", "ShowTables", "ShowTableExtended", "ShowTablesExtended", "ShowViewsCommand",
      "ShowViews", "ShowNamespacesCommand", "ShowNamespaces", "ShowColumnsCommand", "ShowColumns",
      "ShowPartitionsCommand", "ShowPartitions", "ShowTablePropertiesCommand", "ShowTableProperties",
      "ShowCreateTableCommand", "ShowCreateTableAsSerdeCommand", "ShowCreateTable", "ShowFunctionsCommand",
      "ShowFunctions", "ShowCurrentNamespaceCommand", "ShowCurrentNamespace", "ShowCatalogsCommand",
      "DescribeTableCommand", "DescribeRelation", "DescribeColumnCommand", "DescribeColumn",
      "DescribeDatabaseCommand", "DescribeNamespace", "DescribeFunctionCommand", "DescribeFunction",
      "ExplainCommand", "SetCommand", "ResetCommand", "SetNamespaceCommand", "SetCatalogAndNamespace",
      "SetCatalogCommand");
  /** Commands of the owner: what dbt-spark's materializations send (checked further, below). */
  static final Set<String> OWNER_COMMANDS = set(
      "CreateDataSourceTableCommand", "CreateDataSourceTableAsSelectCommand", "InsertIntoHadoopFsRelationCommand",
      "CreateViewCommand", "DropTableCommand", "DropTempViewCommand", "CreateNamespace", "CreateDatabaseCommand",
      "DropTable", "DropNamespace", "DropDatabaseCommand", "AnalyzeTableCommand", "RepairTableCommand");
  /** Table providers: dbt's {@code file_format} here ({@code dbt_project.yml}). */
  static final Set<String> PROVIDERS = set("parquet");
  /** Settings the read role may change for its session. */
  static final Set<String> READ_SETTINGS = set(
      "spark.sql.session.timezone", "spark.sql.ansi.enabled", "spark.sql.shuffle.partitions",
      "spark.sql.adaptive.enabled", "spark.sql.legacy.timeparserpolicy");
  /** Settings the owner may change besides: dbt-spark's incremental insert_overwrite sets the first. */
  static final Set<String> OWNER_SETTINGS = set("spark.sql.sources.partitionoverwritemode");
  /**
   * Built-in functions refused: Java reflection, XML parsers (external entities), readers of descriptor
   * files. Every other name of Spark's {@code FunctionRegistry.builtin} is allowed (an expression class of
   * Spark's {@code catalyst.expressions}); user-defined functions never are.
   */
  static final Set<String> DENIED_FUNCTIONS = set(
      "reflect", "java_method", "try_reflect", "xpath", "xpath_boolean", "xpath_double", "xpath_float",
      "xpath_int", "xpath_long", "xpath_number", "xpath_short", "xpath_string", "from_xml", "schema_of_xml",
      "from_avro", "to_avro", "schema_of_avro", "from_protobuf", "to_protobuf");
  /** Expression classes refused whatever name reached them: reflection, and functions that are not Spark's. */
  private static final Set<String> DENIED_EXPRESSIONS = deniedExpressions();
  private static final String EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions.";

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectCheckRule(new CheckBuilder());
    return BoxedUnit.UNIT;
  }

  private static final class CheckBuilder extends AbstractFunction1<SparkSession, Function1<LogicalPlan, BoxedUnit>>
      implements Serializable {
    @Override
    public Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
      return new Check(session);
    }
  }

  private static final class Check extends AbstractFunction1<LogicalPlan, BoxedUnit> implements Serializable {
    private final transient SparkSession session;

    Check(SparkSession session) {
      this.session = session;
    }

    @Override
    public BoxedUnit apply(LogicalPlan plan) {
      String user = CurrentUserContext.CURRENT_USER().get();
      if (user == null) {
        return BoxedUnit.UNIT;
      }
      boolean owner = "owner".equals(Secrets.load().role(user));
      Walk walk = new Walk(session, owner);
      walk.plan(plan);
      record(owner, walk);
      if (walk.refusal != null) {
        throw new SecurityException(
            "changelake SQL endpoint: " + walk.refusal + " is not allowed for user '" + user + "' (role "
                + (owner ? "owner" : "read") + "; see docs/sql-endpoint.md)");
      }
      return BoxedUnit.UNIT;
    }
  }

  private static synchronized void record(boolean owner, Walk walk) {
    String file = System.getProperty("changelake.endpoint.guard.record");
    if (file == null) {
      return;
    }
    String line = (owner ? "owner" : "read") + "\t" + (walk.refusal == null ? "-" : walk.refusal) + "\t"
        + String.join(",", walk.kinds) + "\n";
    try {
      Files.write(Paths.get(file), line.getBytes(StandardCharsets.UTF_8), StandardOpenOption.CREATE,
          StandardOpenOption.APPEND);
    } catch (IOException e) {
      // a test's record only: never a reason to fail a statement
    }
  }

  /** One statement's plan, walked whole: the kinds of node met, and the first refusal. */
  private static final class Walk {
    final SparkSession session;
    final boolean owner;
    final Set<String> kinds = new TreeSet<>();
    String refusal;

    Walk(SparkSession session, boolean owner) {
      this.session = session;
      this.owner = owner;
    }

    void refuse(String why) {
      if (refusal == null) {
        refusal = why;
      }
    }

    void plan(LogicalPlan plan) {
      String name = plan.getClass().getSimpleName().replace("$", "");  // a case object's class ends in $
      kinds.add(name);
      if ("View".equals(name)) {
        if (isGlobalTemp(tableDatabase(call(plan, "desc")))) {
          return;  // the server's own views, built from its files: only the server creates them
        }
      } else if ("DataSourceV2Relation".equals(name)) {
        Object catalog = option(call(plan, "catalog"));
        if (catalog == null || !"changelake.spark.ChangelakeCatalog".equals(catalog.getClass().getName())) {
          refuse("reading a table outside changelake's catalog (" + describe(call(plan, "table")) + ")");
        }
      } else if ("LogicalRelation".equals(name)) {
        Object table = option(call(plan, "catalogTable"));
        if (table == null) {
          refuse("reading or writing files by path");
        } else {
          managedTable(table, "reading");
        }
      } else if (QUERY.contains(name)) {
        // a relational operator: its expressions and children are checked below
      } else if (READ_COMMANDS.contains(name)) {
        if ("SetCommand".equals(name)) {
          String changed = changedSetting(plan);
          if (changed != null && !allowedSetting(changed)) {
            refuse("SET " + changed);
          }
        }
      } else if (owner && OWNER_COMMANDS.contains(name)) {
        ownerCommand(name, plan);
      } else {
        refuse(name);
      }
      Iterator<Expression> expressions = plan.expressions().iterator();
      while (expressions.hasNext()) {
        expression(expressions.next());
      }
      Iterator<LogicalPlan> children = plan.children().iterator();
      while (children.hasNext()) {
        plan(children.next());
      }
      // An analysed CREATE VIEW or CREATE TABLE ... AS keeps its query here, not among its children: a view's
      // body is checked when it is created, and again when a query reads it (a View node other than global_temp).
      Iterator<?> inner = plan.innerChildren().iterator();
      while (inner.hasNext()) {
        Object child = inner.next();
        if (child instanceof LogicalPlan) {
          plan((LogicalPlan) child);
        }
      }
    }

    private boolean allowedSetting(String key) {
      String k = key.trim().toLowerCase(Locale.ROOT);
      return READ_SETTINGS.contains(k) || (owner && OWNER_SETTINGS.contains(k));
    }

    /** What dbt's login may do, table by table: managed tables of an allowed provider, no location. */
    private void ownerCommand(String name, LogicalPlan plan) {
      switch (name) {
        case "CreateDataSourceTableCommand":
        case "CreateDataSourceTableAsSelectCommand":
          managedTable(call(plan, "table"), "creating");
          break;
        case "InsertIntoHadoopFsRelationCommand":
          Object table = option(call(plan, "catalogTable"));
          if (table == null) {
            // CREATE TABLE ... AS writes its new table's files by path, from inside the checked command
            tableDirectory(call(plan, "outputPath"), call(plan, "fileFormat"));
          } else {
            managedTable(table, "writing");
          }
          break;
        case "CreateViewCommand":
          if (String.valueOf(call(plan, "viewType")).contains("GlobalTempView")
              || isGlobalTemp(option(call(call(plan, "name"), "database")))) {
            refuse("creating or replacing a global view (the server's own)");
          }
          break;
        case "DropTableCommand":
          Object dropped = call(plan, "tableName");
          Object in = option(call(dropped, "database"));
          if (isGlobalTemp(in)) {
            refuse("dropping a global view (the server's own)");
          } else if (!tableAtHome(in == null ? session.sessionState().catalog().getCurrentDatabase() : (String) in,
              String.valueOf(call(dropped, "table")))) {
            refuse("dropping a table at a location of the client's choosing");
          }
          break;
        case "DropTempViewCommand":
          Object ident = call(plan, "ident");
          if (!(ident instanceof Identifier) || ((Identifier) ident).namespace().length != 0) {
            refuse("dropping a global view (the server's own)");  // a local temporary view has a bare name
          }
          break;
        case "DropTable":
          Object resolved = call(plan, "child");
          Object target = call(resolved, "identifier");
          Object catalog = call(resolved, "catalog");
          String[] parts = target instanceof Identifier ? ((Identifier) target).namespace() : new String[0];
          if (!"ResolvedIdentifier".equals(resolved == null ? null : resolved.getClass().getSimpleName())
              || !(catalog instanceof CatalogPlugin) || !"spark_catalog".equals(((CatalogPlugin) catalog).name())
              || parts.length != 1 || isGlobalTemp(parts[0])) {
            refuse("dropping a table outside the metastore's schemas");
          } else if (!tableAtHome(parts[0], ((Identifier) target).name())) {
            refuse("dropping a table at a location of the client's choosing");  // its directory would go
          }
          break;
        case "CreateDatabaseCommand":
          if (option(call(plan, "path")) != null) {
            refuse("a schema at a location of the client's choosing");
          }
          break;
        case "CreateNamespace":
          Object properties = call(plan, "properties");
          if (properties instanceof scala.collection.Map
              && ((scala.collection.Map<?, ?>) properties).keys().mkString("\n").toLowerCase(Locale.ROOT)
                  .matches("(?s)(.*\n)?location(\n.*)?")) {
            refuse("a schema at a location of the client's choosing");
          }
          sessionCatalogNamespace(call(plan, "name"), "creating a schema");
          break;
        case "DropDatabaseCommand":
          droppedSchema(String.valueOf(call(plan, "databaseName")));
          break;
        case "DropNamespace":
          String schema = sessionCatalogNamespace(call(plan, "namespace"), "dropping a schema");
          if (schema != null) {
            droppedSchema(schema);
          }
          break;
        case "AnalyzeTableCommand":
          if (isGlobalTemp(option(call(call(plan, "tableIdent"), "database")))) {
            refuse("analysing a global view");
          }
          break;
        case "RepairTableCommand":
          // CREATE TABLE ... PARTITIONED BY ... AS registers its partitions so: the table's own directory only
          if (isGlobalTemp(option(call(call(plan, "tableName"), "database")))) {
            refuse("repairing a global view");
          }
          break;
        default:
          refuse(name);
      }
    }

    /** The single-part name of a namespace of the session catalog, or null after refusing another. */
    private String sessionCatalogNamespace(Object resolved, String what) {
      Object catalog = call(resolved, "catalog");
      Object namespace = call(resolved, "namespace");
      String catalogName = catalog instanceof CatalogPlugin ? ((CatalogPlugin) catalog).name() : null;
      if (!"spark_catalog".equals(catalogName) || !(namespace instanceof scala.collection.Seq)
          || ((scala.collection.Seq<?>) namespace).size() != 1) {
        refuse(what + " outside the metastore's catalog");
        return null;
      }
      return String.valueOf(((scala.collection.Seq<?>) namespace).head());
    }

    /**
     * Dropping a schema deletes its directory, whatever else is in it: only a schema at the place the metastore
     * gives it (as {@code CREATE SCHEMA} without {@code LOCATION} puts it), never {@code default} or
     * {@code global_temp}.
     */
    private void droppedSchema(String schema) {
      if (isGlobalTemp(schema) || "default".equalsIgnoreCase(schema)) {
        refuse("dropping the schema " + schema);
        return;
      }
      org.apache.spark.sql.catalyst.catalog.SessionCatalog catalog = session.sessionState().catalog();
      if (!catalog.databaseExists(schema)) {
        return;  // nothing to delete (DROP ... IF EXISTS)
      }
      URI location = catalog.getDatabaseMetadata(schema).locationUri();
      if (location == null || !bare(location.toString()).equals(homeOf(schema))) {
        refuse("dropping a schema at a location of the client's choosing (" + location + ")");
      }
    }

    /** A write by path only to a managed table's directory: {@code <warehouse>/<schema>.db/<table>} in Parquet. */
    private void tableDirectory(Object path, Object format) {
      String warehouse = bare(session.conf().get("spark.sql.warehouse.dir"));
      String target = path == null ? "" : bare(String.valueOf(path));
      String[] parts = target.startsWith(warehouse + "/")
          ? target.substring(warehouse.length() + 1).split("/") : new String[0];
      boolean tableDir = (parts.length == 2 && parts[0].endsWith(".db")) || parts.length == 1;
      if (!tableDir || Arrays.asList(parts).contains("..") || Arrays.asList(parts).contains(".")) {
        refuse("writing files by path");
      } else if (format == null || !"ParquetFileFormat".equals(format.getClass().getSimpleName())) {
        refuse("writing a table of format " + (format == null ? "?" : format.getClass().getSimpleName()));
      }
    }

    /** A table of the metastore dbt manages: managed (no LOCATION, no OPTIONS path), an allowed provider. */
    private void managedTable(Object table, String what) {
      if (table == null) {
        refuse(what + " a table the guard cannot see");
        return;
      }
      Object type = call(table, "tableType");
      Object storage = call(table, "storage");
      String provider = String.valueOf(option(call(table, "provider"))).toLowerCase(Locale.ROOT);
      Object options = storage == null ? null : call(storage, "properties");
      if (type == null || !"MANAGED".equals(String.valueOf(call(type, "name")))
          || (storage != null && option(call(storage, "locationUri")) != null && "creating".equals(what))) {
        refuse(what + " a table at a location of the client's choosing");
      } else if (!PROVIDERS.contains(provider)) {
        refuse(what + " a table of provider " + provider);
      } else if (options instanceof scala.collection.Map && !((scala.collection.Map<?, ?>) options).isEmpty()
          && "creating".equals(what)) {
        refuse(what + " a table with OPTIONS " + ((scala.collection.Map<?, ?>) options).keys().mkString(", "));
      } else if (isGlobalTemp(tableDatabase(table))) {
        refuse(what + " a table in global_temp");
      } else {
        Object database = tableDatabase(table);
        String schema = database == null ? session.sessionState().catalog().getCurrentDatabase() : (String) database;
        Object location = storage == null ? null : option(call(storage, "locationUri"));
        String name = String.valueOf(call(call(table, "identifier"), "table")).toLowerCase(Locale.ROOT);
        if ("creating".equals(what) ? !schemaAtHome(schema)
            : location == null || !bare(location.toString()).equals(homeOf(schema) + "/" + name)) {
          refuse(what + " a table at a location of the client's choosing");
        }
      }
    }

    /** Where the metastore puts a schema's directory: {@code <warehouse>/<schema>.db}, the warehouse for default. */
    private String homeOf(String schema) {
      String warehouse = bare(session.conf().get("spark.sql.warehouse.dir"));
      return "default".equalsIgnoreCase(schema) ? warehouse : warehouse + "/" + schema.toLowerCase(Locale.ROOT) + ".db";
    }

    /** A schema that is where the metastore puts it (or none yet: creating a table in it fails on its own). */
    private boolean schemaAtHome(String schema) {
      org.apache.spark.sql.catalyst.catalog.SessionCatalog catalog = session.sessionState().catalog();
      if (!catalog.databaseExists(schema)) {
        return true;
      }
      URI location = catalog.getDatabaseMetadata(schema).locationUri();
      return location != null && bare(location.toString()).equals(homeOf(schema));
    }

    /** A table whose drop deletes nothing but its own directory in its schema's (or nothing: external, absent). */
    private boolean tableAtHome(String schema, String table) {
      org.apache.spark.sql.catalyst.catalog.ExternalCatalog catalog =
          session.sessionState().catalog().externalCatalog();
      if (!catalog.databaseExists(schema) || !catalog.tableExists(schema, table)) {
        return true;
      }
      Object metadata = catalog.getTable(schema, table);
      Object type = call(call(metadata, "tableType"), "name");
      Object location = option(call(call(metadata, "storage"), "locationUri"));
      if (!"MANAGED".equals(String.valueOf(type))) {
        return true;  // an external table's drop keeps its files (a view has none)
      }
      return schemaAtHome(schema) && location != null
          && bare(location.toString()).equals(homeOf(schema) + "/" + table.toLowerCase(Locale.ROOT));
    }

    void expression(Expression expression) {
      Class<?> type = expression.getClass();
      String name = type.getSimpleName();
      if (DENIED_EXPRESSIONS.contains(type.getName()) || DENIED_EXPRESSIONS.contains(name)) {
        refuse("the built-in function " + name);
      } else if (expression instanceof UserDefinedExpression) {
        refuse("a user-defined function (" + ((UserDefinedExpression) expression).name() + ")");
      } else if (!type.getName().startsWith(EXPRESSIONS)) {
        refuse("the expression " + type.getName() + " (only Spark's built-in functions)");
      }
      if (expression instanceof SubqueryExpression) {
        plan(((SubqueryExpression) expression).plan());
      }
      Iterator<Expression> children = expression.children().iterator();
      while (children.hasNext()) {
        expression(children.next());
      }
    }

    private boolean isGlobalTemp(Object database) {
      return database != null && session.sessionState().catalog().isGlobalTempViewDB(String.valueOf(database));
    }
  }

  private static Set<String> deniedExpressions() {
    Set<String> denied = new HashSet<>(Arrays.asList(
        "CallMethodViaReflection", "ScalaUDF", "ScalaUDAF", "ScalaAggregator", "PythonUDF", "PythonUDAF",
        "PythonUDTF", "ApplyFunctionExpression", "V2Aggregator", "SQLFunctionExpression"));
    scala.collection.Map<String, Tuple2<ExpressionInfo, Function1<scala.collection.immutable.Seq<Expression>, Expression>>>
        registry = FunctionRegistry$.MODULE$.expressions();
    for (String function : DENIED_FUNCTIONS) {
      Option<Tuple2<ExpressionInfo, Function1<scala.collection.immutable.Seq<Expression>, Expression>>> entry =
          registry.get(function);
      if (entry.isDefined()) {
        denied.add(entry.get()._1().getClassName());
      }
    }
    return Collections.unmodifiableSet(denied);
  }

  /** The key a {@code SET key=value} assigns, or null for {@code SET}, {@code SET -v} and {@code SET key}. */
  private static String changedSetting(LogicalPlan plan) {
    Object kv = option(call(plan, "kv"));
    if (!(kv instanceof Tuple2)) {
      return null;
    }
    Object value = ((Tuple2<?, ?>) kv)._2();
    if (value instanceof Option && ((Option<?>) value).isEmpty()) {
      return null;
    }
    return String.valueOf(((Tuple2<?, ?>) kv)._1());
  }

  private static Object tableDatabase(Object table) {
    return table == null ? null : option(call(call(table, "identifier"), "database"));
  }

  /** A local path or {@code file:} URI as a plain absolute path without a trailing slash. */
  private static String bare(String location) {
    String path = location.replaceFirst("^file:(//)?", "");
    return path.replaceAll("/+", "/").replaceAll("(.)/$", "$1");
  }

  private static String describe(Object table) {
    Object name = table == null ? null : call(table, "name");
    return name == null ? "?" : String.valueOf(name);
  }

  private static Set<String> set(String... names) {
    return Collections.unmodifiableSet(new HashSet<>(Arrays.asList(names)));
  }

  private static Object call(Object target, String method) {
    if (target == null) {
      return null;
    }
    try {
      Method m = target.getClass().getMethod(method);
      if (!m.canAccess(target)) {
        m.setAccessible(true);  // a public accessor of a class that is not public (an interface's implementation)
      }
      return m.invoke(target);
    } catch (ReflectiveOperationException | RuntimeException e) {
      return null;
    }
  }

  /** The value of a Scala {@code Option} (null for None); anything else as it is. */
  private static Object option(Object value) {
    if (value instanceof Option) {
      return ((Option<?>) value).isEmpty() ? null : ((Option<?>) value).get();
    }
    return value;
  }
}
