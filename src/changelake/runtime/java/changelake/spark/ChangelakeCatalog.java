package changelake.spark;

import java.util.HashMap;
import java.util.Map;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.io.FileIO;
import org.apache.spark.sql.SparkSession;
import org.apache.iceberg.spark.SparkCatalog;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.NamespaceChange;
import org.apache.spark.sql.connector.catalog.StagedTable;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.catalog.TableInfo;
import org.apache.spark.sql.connector.catalog.View;
import org.apache.spark.sql.connector.catalog.ViewChange;
import org.apache.spark.sql.connector.catalog.ViewInfo;
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Iceberg's {@link SparkCatalog} over the catalog changelake writes, for readers: Spark reads changelake's tables
 * as the Iceberg tables they are (position deletes applied by Iceberg, time travel, metadata tables), and writes
 * nothing.
 *
 * <ul>
 *   <li>{@code iceberg-catalog-name}: the name the tables are registered under in the Iceberg catalog (a SQL
 *       catalog's {@code catalog_name} column, pyiceberg's catalog name), when it differs from this Spark
 *       catalog's name.
 *   <li>A primary-key table's {@code _bucket} column is hidden: {@code SELECT *} and {@code DESCRIBE} leave it
 *       out, a query that names it still reads it (a metadata column, as Iceberg's {@code _file}).
 *   <li>Its FileIO is tried on the warehouse once, when the catalog is built: a FileIO that cannot read it (an
 *       {@code io-impl} for another scheme, a store that is not there, keys it refuses) fails the first query with
 *       an error that says so, where Iceberg retries each table's metadata read 20 times, for minutes.
 *   <li>Read only: every table is {@link ReadOnlyTable}, and the catalog creates, alters, drops and renames
 *       nothing and runs no procedure. changelake writes its tables (its commit protocol keeps every batch
 *       exactly once); Iceberg's maintenance procedures run through a catalog of the user's own over the same
 *       Iceberg catalog, and changelake survives their commits (docs/operations.md).
 * </ul>
 */
public class ChangelakeCatalog extends SparkCatalog {
  static final String ICEBERG_CATALOG_NAME = "iceberg-catalog-name";

  /** The FileIO an Iceberg catalog of this type uses when {@code io-impl} is not set (JDBC: Hadoop's). */
  static final String DEFAULT_FILE_IO = "org.apache.iceberg.hadoop.HadoopFileIO";

  @Override
  protected Catalog buildIcebergCatalog(String name, CaseInsensitiveStringMap options) {
    String registered = options.get(ICEBERG_CATALOG_NAME);
    Catalog catalog =
        super.buildIcebergCatalog(registered == null || registered.isEmpty() ? name : registered, options);
    checkWarehouse(name, options);
    return catalog;
  }

  /**
   * Whether the catalog's FileIO reads its warehouse: one existence check of the warehouse location, without the
   * store client's retries. A REST catalog without {@code io-impl} gets its FileIO from the server: not checked.
   */
  static void checkWarehouse(String name, CaseInsensitiveStringMap options) {
    String warehouse = options.get(CatalogProperties.WAREHOUSE_LOCATION);
    String impl = options.get(CatalogProperties.FILE_IO_IMPL);
    if (warehouse == null || warehouse.isEmpty() || (impl == null && "rest".equals(options.get("type")))) {
      return;
    }
    String io = impl == null ? DEFAULT_FILE_IO : impl;
    Map<String, String> properties = new HashMap<>(options.asCaseSensitiveMap());
    properties.put("s3.retry.num-retries", "0"); // a store that is not there fails now, not after backoffs
    try (FileIO fileIO =
        CatalogUtil.loadFileIO(io, properties, SparkSession.active().sessionState().newHadoopConf())) {
      fileIO.newInputFile(warehouse).exists();
    } catch (RuntimeException e) {
      throw new IllegalArgumentException(
          "changelake's Spark catalog " + name + ": its FileIO (io-impl " + io + ") cannot read the warehouse "
              + warehouse + ": " + e,
          e);
    }
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    return readOnly(super.loadTable(ident));
  }

  @Override
  public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
    return readOnly(super.loadTable(ident, version));
  }

  @Override
  public Table loadTable(Identifier ident, long timestampMicros) throws NoSuchTableException {
    return readOnly(super.loadTable(ident, timestampMicros));
  }

  private static Table readOnly(Table table) {
    return table instanceof SparkTable ? new ReadOnlyTable((SparkTable) table) : table;
  }

  private static UnsupportedOperationException refused(String what) {
    return new UnsupportedOperationException(
        "changelake's Spark catalog is read only (" + what + "): changelake writes its tables; run Iceberg "
            + "procedures through a catalog of your own over the same Iceberg catalog (see docs/operations.md)");
  }

  @Override
  public Table createTable(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties) {
    throw refused("CREATE TABLE");
  }

  @Override
  public Table createTable(Identifier ident, TableInfo info) {
    throw refused("CREATE TABLE");
  }

  @Override
  public StagedTable stageCreate(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties) {
    throw refused("CREATE TABLE");
  }

  @Override
  public StagedTable stageCreate(Identifier ident, TableInfo info) {
    throw refused("CREATE TABLE");
  }

  @Override
  public StagedTable stageReplace(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties) {
    throw refused("REPLACE TABLE");
  }

  @Override
  public StagedTable stageReplace(Identifier ident, TableInfo info) {
    throw refused("REPLACE TABLE");
  }

  @Override
  public StagedTable stageCreateOrReplace(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties) {
    throw refused("CREATE OR REPLACE TABLE");
  }

  @Override
  public StagedTable stageCreateOrReplace(Identifier ident, TableInfo info) {
    throw refused("CREATE OR REPLACE TABLE");
  }

  @Override
  public Table alterTable(Identifier ident, TableChange... changes) {
    throw refused("ALTER TABLE");
  }

  @Override
  public boolean dropTable(Identifier ident) {
    throw refused("DROP TABLE");
  }

  @Override
  public boolean purgeTable(Identifier ident) {
    throw refused("DROP TABLE ... PURGE");
  }

  @Override
  public void renameTable(Identifier from, Identifier to) {
    throw refused("ALTER TABLE ... RENAME");
  }

  @Override
  public void createNamespace(String[] namespace, Map<String, String> metadata) {
    throw refused("CREATE NAMESPACE");
  }

  @Override
  public void alterNamespace(String[] namespace, NamespaceChange... changes) {
    throw refused("ALTER NAMESPACE");
  }

  @Override
  public boolean dropNamespace(String[] namespace, boolean cascade) {
    throw refused("DROP NAMESPACE");
  }

  @Override
  public View createView(ViewInfo info) {
    throw refused("CREATE VIEW");
  }

  @Override
  public View replaceView(Identifier ident, String sql, String currentCatalog, String[] currentNamespace,
      StructType schema, String[] queryColumnNames, String[] columnAliases, String[] columnComments,
      Map<String, String> properties) {
    throw refused("CREATE OR REPLACE VIEW");
  }

  @Override
  public View alterView(Identifier ident, ViewChange... changes) {
    throw refused("ALTER VIEW");
  }

  @Override
  public boolean dropView(Identifier ident) {
    throw refused("DROP VIEW");
  }

  @Override
  public void renameView(Identifier from, Identifier to) {
    throw refused("ALTER VIEW ... RENAME");
  }

  @Override
  public UnboundProcedure loadProcedure(Identifier ident) {
    throw refused("CALL " + ident);
  }
}
