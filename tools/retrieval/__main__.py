"""`python -m tools.retrieval build --corpus X --out DIR`: build a retrieval index."""

from tools.retrieval.retriever import main

raise SystemExit(main())
