"""What a run reads: files a user writes (suite, dataset and reference-set files) and how they are decoded."""
