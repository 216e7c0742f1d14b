"""View collections (decisions.md, Aggregation and view collections): their definition and fields
(`definition.py`), their groups kept current per process (`groups.py`) and the reads of their records
(`reads.py`)."""
