"""Report writers: results.json, junit.xml, summary.md and the console table."""
