# faiss-cpu ships a partial __init__.pyi generated from its SWIG wrapper: it misses most of the API evaltasks uses
# (Index.hnsw, SearchParametersHNSW, IndexHNSW.storage, keyword parameters). mypy reads this stub first
# (pyproject [tool.mypy] mypy_path), so faiss is typed as Any instead of wrongly.
from typing import Any

def __getattr__(name: str) -> Any: ...
