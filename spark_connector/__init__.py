"""PySpark data source for Strata topics. Arrives with the Spark connector issue."""
