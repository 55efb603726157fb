"""What every stage agrees on: Parquet schemas, column names, presentations, views, errors."""
