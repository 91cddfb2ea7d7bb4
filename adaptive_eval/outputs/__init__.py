"""What a page says and the files a run writes: presentation, the headline, summary.json and its
schema, report.md, report.html, provenance (layers 6 and 7)."""
