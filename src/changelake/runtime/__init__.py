"""Running Spark for changelake: the one SparkSession builder, the warm SQL endpoint and the dbt runner."""
