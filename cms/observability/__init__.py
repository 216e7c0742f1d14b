"""What the service reports about itself (issue 30): the signals seam, and the sinks that turn
signals into Prometheus metrics, the dashboard's per-minute series and the request log."""
