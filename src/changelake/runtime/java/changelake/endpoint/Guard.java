package changelake.endpoint;

import java.io.Serializable;
import java.lang.reflect.Method;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.CurrentUserContext;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
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
 * <p>A statement is a Thrift client's when Spark's Thrift server has set the session's user
 * ({@code CurrentUserContext}); statements of the server itself (the views it registers) and of Spark
 * Connect clients (who hold the endpoint's token, so are its owner) have none and pass.
 *
 * <ul>
 *   <li>Every Thrift user: no writing to a directory ({@code INSERT OVERWRITE DIRECTORY}), no code loaded
 *       ({@code CREATE FUNCTION}, {@code ADD JAR/FILE/ARCHIVE}), no file read or written by path
 *       ({@code text.`/path`}, a table without a catalog entry), no table at a chosen location
 *       ({@code LOCATION}, {@code SET LOCATION}, {@code LIKE ... LOCATION}, {@code ADD PARTITION},
 *       {@code LOAD DATA}, a data source's path), no global view created or replaced, no shell command
 *       ({@code SELECT TRANSFORM ... USING}), no Java reflection ({@code reflect}, {@code java_method}).
 *   <li>The {@code read} role (every user but the owner): queries, {@code SHOW}, {@code DESCRIBE},
 *       {@code EXPLAIN}, {@code USE} and reading settings; no other command (no DDL, DML, cache or
 *       view), and no setting changed but a few harmless ones.
 * </ul>
 *
 * <p>The views changelake registers ({@code global_temp}) are built from Parquet files by path; a {@code View}
 * node is not looked into, since only the server creates global views (the read role cannot, and the server
 * registers a dropped view again).
 */
public final class Guard extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> implements Serializable {
  private static final Set<String> NEVER = new HashSet<>(Arrays.asList(
      "InsertIntoDir", "InsertIntoDataSourceDirCommand", "InsertIntoHiveDirCommand",
      "CreateFunction", "CreateFunctionCommand", "CreateUserDefinedFunction", "AddJarsCommand",
      "AddFilesCommand", "AddArchivesCommand", "CreateTempViewUsing", "RefreshResource",
      // a shell command per row (SELECT TRANSFORM ... USING 'cmd')
      "ScriptTransformation",
      // files moved into a table, tables and partitions at a chosen place, a data source's path changed
      "LoadDataCommand", "LoadData", "AlterTableSetLocationCommand", "SetTableLocation",
      "CreateTableLikeCommand", "CreateTableLike", "AlterTableAddPartitionCommand", "AddPartitions",
      "AlterTableSetSerDePropertiesCommand", "SetTableSerDeProperties"));
  private static final Set<String> READ_COMMANDS = new HashSet<>(Arrays.asList(
      "ExplainCommand", "SetCommand", "SetNamespaceCommand", "SetCatalogAndNamespace", "SetCatalogCommand",
      "ShowCurrentNamespaceCommand", "ShowCatalogsCommand"));
  private static final Set<String> READ_SETTINGS = new HashSet<>(Arrays.asList(
      "spark.sql.session.timeZone", "spark.sql.ansi.enabled", "spark.sql.shuffle.partitions",
      "spark.sql.adaptive.enabled", "spark.sql.legacy.timeParserPolicy"));

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectCheckRule(new CheckBuilder());
    return BoxedUnit.UNIT;
  }

  private static final class CheckBuilder extends AbstractFunction1<SparkSession, Function1<LogicalPlan, BoxedUnit>>
      implements Serializable {
    @Override
    public Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
      return new Check();
    }
  }

  private static final class Check extends AbstractFunction1<LogicalPlan, BoxedUnit> implements Serializable {
    @Override
    public BoxedUnit apply(LogicalPlan plan) {
      String user = CurrentUserContext.CURRENT_USER().get();
      if (user == null) {
        return BoxedUnit.UNIT;
      }
      boolean owner = "owner".equals(Secrets.load().role(user));
      String refusal = refusal(plan, owner);
      if (refusal != null) {
        throw new SecurityException(
            "changelake SQL endpoint: " + refusal + " is not allowed for user '" + user + "' (role "
                + (owner ? "owner" : "read") + "; see docs/sql-endpoint.md)");
      }
      return BoxedUnit.UNIT;
    }
  }

  /** Why the plan is refused, or null. */
  static String refusal(LogicalPlan plan, boolean owner) {
    String name = plan.getClass().getSimpleName();
    if ("View".equals(name)) {
      return null;
    }
    if (NEVER.contains(name)) {
      return name;
    }
    if (name.startsWith("Create")) {
      for (String accessor : new String[] {"table", "tableDesc"}) {
        Object table = call(plan, accessor);
        Object type = table == null ? null : call(table, "tableType");
        if (type != null && "EXTERNAL".equals(String.valueOf(call(type, "name")))) {
          return "a table at a location of the client's choosing";
        }
      }
      Object viewType = call(plan, "viewType");
      if (viewType != null && String.valueOf(viewType).contains("GlobalTempView")) {
        return "creating or replacing a global view (the server's own)";
      }
    }
    if ("LogicalRelation".equals(name) && isEmpty(call(plan, "catalogTable"))) {
      return "reading or writing files by path";
    }
    if ("DataSourceV2Relation".equals(name)) {
      Object table = call(plan, "table");
      if (table != null && isFileTable(table)) {
        return "reading or writing files by path";
      }
    }
    if ("SetCommand".equals(name)) {
      String changed = changedSetting(plan);
      if (changed != null && isPinned(changed)) {
        return "SET " + changed;
      }
    }
    if (!owner && plan instanceof Command) {
      boolean reads = name.startsWith("Show") || name.startsWith("Describe") || READ_COMMANDS.contains(name);
      if (!reads) {
        return name;
      }
      if ("SetCommand".equals(name)) {
        String changed = changedSetting(plan);
        if (changed != null && !READ_SETTINGS.contains(changed)) {
          return "SET " + changed;
        }
      }
    }
    Iterator<Expression> expressions = plan.expressions().iterator();
    while (expressions.hasNext()) {
      String found = refusal(expressions.next(), owner);
      if (found != null) {
        return found;
      }
    }
    Iterator<LogicalPlan> children = plan.children().iterator();
    while (children.hasNext()) {
      String found = refusal(children.next(), owner);
      if (found != null) {
        return found;
      }
    }
    // An analysed CREATE VIEW or CACHE TABLE ... AS keeps its query here, not among its children: a view's
    // body is checked when it is created, so reading the view later (a View node) need not look inside.
    Iterator<?> inner = plan.innerChildren().iterator();
    while (inner.hasNext()) {
      Object child = inner.next();
      if (child instanceof LogicalPlan) {
        String found = refusal((LogicalPlan) child, owner);
        if (found != null) {
          return found;
        }
      }
    }
    return null;
  }

  /** Settings no Thrift user may change, owner included: a catalog plugin (a JDBC catalog reaches any
   * database and runs its driver's code) and the endpoint's statement timeout. */
  private static boolean isPinned(String key) {
    String k = key.trim().toLowerCase(java.util.Locale.ROOT);
    return k.startsWith("spark.sql.catalog.") || k.equals("spark.sql.catalog")
        || k.startsWith("spark.sql.thriftserver.") || k.startsWith("spark.sql.extensions");
  }

  private static boolean isFileTable(Object table) {
    try {
      return Class.forName("org.apache.spark.sql.execution.datasources.v2.FileTable", false,
          table.getClass().getClassLoader()).isInstance(table);
    } catch (ClassNotFoundException e) {
      return false;
    }
  }

  private static String refusal(Expression expression, boolean owner) {
    String name = expression.getClass().getSimpleName();
    if ("CallMethodViaReflection".equals(name)) {
      return "Java reflection (reflect, java_method)";
    }
    if (expression instanceof SubqueryExpression) {
      String found = refusal(((SubqueryExpression) expression).plan(), owner);
      if (found != null) {
        return found;
      }
    }
    Iterator<Expression> children = expression.children().iterator();
    while (children.hasNext()) {
      String found = refusal(children.next(), owner);
      if (found != null) {
        return found;
      }
    }
    return null;
  }

  /** The key a {@code SET key=value} assigns, or null for {@code SET}, {@code SET -v} and {@code SET key}. */
  private static String changedSetting(LogicalPlan plan) {
    Object kv = call(plan, "kv");
    if (!(kv instanceof Option) || ((Option<?>) kv).isEmpty()) {
      return null;
    }
    Object pair = ((Option<?>) kv).get();
    if (!(pair instanceof Tuple2)) {
      return null;
    }
    Object value = ((Tuple2<?, ?>) pair)._2();
    if (value instanceof Option && ((Option<?>) value).isEmpty()) {
      return null;
    }
    return String.valueOf(((Tuple2<?, ?>) pair)._1());
  }

  private static Object call(Object target, String method) {
    try {
      Method m = target.getClass().getMethod(method);
      return m.invoke(target);
    } catch (ReflectiveOperationException | RuntimeException e) {
      return null;
    }
  }

  private static boolean isEmpty(Object option) {
    return option instanceof Option && ((Option<?>) option).isEmpty();
  }
}
