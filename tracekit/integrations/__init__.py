"""Where tracekit meets other tools: torch.profiler (profiler.py), MLflow (mlflow.py) and
pytest (pytest_plugin.py). They call tracekit's API; nothing in tracekit imports them."""
