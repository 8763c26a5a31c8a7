package changelake.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.MetadataColumn;
import org.apache.spark.sql.connector.catalog.SupportsMetadataColumns;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * An Iceberg table of changelake's catalog as Spark reads it: Iceberg's own scan (deletes applied, snapshot or
 * time travel as loaded), no write capability, and a primary-key table's {@code _bucket} column as a metadata
 * column: out of {@code SELECT *} and {@code DESCRIBE}, readable by name. Iceberg resolves a projected
 * {@code _bucket} from the table schema, so the scan is Iceberg's unchanged.
 */
final class ReadOnlyTable implements Table, SupportsRead, SupportsMetadataColumns {
  static final String BUCKET = "_bucket";
  static final String SPEC_PROPERTY = "changelake.spec";
  static final String CHANGE_TYPE = "_change_type";

  private final SparkTable iceberg;
  private final boolean hideBucket;

  ReadOnlyTable(SparkTable iceberg) {
    this.iceberg = iceberg;
    StructType schema = iceberg.schema();
    Set<String> names = new java.util.HashSet<>(Arrays.asList(schema.fieldNames()));
    // A PK table (its spec property, a _bucket column, no changelog columns); a changelog's _bucket is its log.
    this.hideBucket = names.contains(BUCKET) && !names.contains(CHANGE_TYPE)
        && iceberg.table().properties().containsKey(SPEC_PROPERTY);
  }

  @Override
  public String name() {
    return iceberg.name();
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    StructType schema = iceberg.schema();
    if (!hideBucket) {
      return schema;
    }
    List<StructField> kept = new ArrayList<>();
    for (StructField field : schema.fields()) {
      if (!BUCKET.equals(field.name())) {
        kept.add(field);
      }
    }
    return new StructType(kept.toArray(new StructField[0]));
  }

  @Override
  public Column[] columns() {
    if (!hideBucket) {
      return iceberg.columns();
    }
    List<Column> kept = new ArrayList<>();
    for (Column column : iceberg.columns()) {
      if (!BUCKET.equals(column.name())) {
        kept.add(column);
      }
    }
    return kept.toArray(new Column[0]);
  }

  @Override
  public Transform[] partitioning() {
    // A table created before merge-on-read is partitioned by _bucket too: shown only where the column is.
    List<Transform> kept = new ArrayList<>();
    for (Transform transform : iceberg.partitioning()) {
      boolean onBucket = false;
      for (NamedReference ref : transform.references()) {
        onBucket |= hideBucket && ref.fieldNames().length == 1 && BUCKET.equals(ref.fieldNames()[0]);
      }
      if (!onBucket) {
        kept.add(transform);
      }
    }
    return kept.toArray(new Transform[0]);
  }

  @Override
  public Map<String, String> properties() {
    return iceberg.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    Set<TableCapability> reads = EnumSet.noneOf(TableCapability.class);
    for (TableCapability capability : iceberg.capabilities()) {
      if (capability == TableCapability.BATCH_READ || capability == TableCapability.MICRO_BATCH_READ) {
        reads.add(capability);
      }
    }
    return reads;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return iceberg.newScanBuilder(options);
  }

  @Override
  public MetadataColumn[] metadataColumns() {
    MetadataColumn[] own = iceberg.metadataColumns();
    if (!hideBucket) {
      return own;
    }
    MetadataColumn[] out = new MetadataColumn[own.length + 1];  // own's runtime type is Iceberg's own class
    System.arraycopy(own, 0, out, 0, own.length);
    out[own.length] = new MetadataColumn() {
      @Override
      public String name() {
        return BUCKET;
      }

      @Override
      public DataType dataType() {
        return DataTypes.IntegerType;
      }

      @Override
      public String comment() {
        return "changelake's bucket of the row's key: pmod(xxhash64(bucket key), bucket.num)";
      }
    };
    return out;
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof ReadOnlyTable && iceberg.equals(((ReadOnlyTable) other).iceberg);
  }

  @Override
  public int hashCode() {
    return iceberg.hashCode();
  }

  @Override
  public String toString() {
    return iceberg.toString();
  }
}
