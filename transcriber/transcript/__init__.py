"""What the engines produce: ``Word``, ``Segment``, ``Transcript`` (types.py), the text rules
(text.py), and the transforms from one transcript to another (transforms.py). Knows no engine."""
