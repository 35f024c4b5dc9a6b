"""Code intake: CSV files dropped in the imports bucket, generated codes, and import jobs."""
