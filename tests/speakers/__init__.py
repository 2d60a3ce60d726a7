"""Tests of the speakers pass: segmentation, embeddings, clustering, labels."""
