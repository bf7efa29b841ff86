"""`tracekit.mlflow.log_analysis(analysis)` (see tracekit/integrations/mlflow.py)."""

from tracekit.integrations.mlflow import headline_metrics, log_analysis

__all__ = ["headline_metrics", "log_analysis"]
