"""arq jobs: email now, webhook deliveries later. `arq workers.WorkerSettings` runs them."""

from workers.settings import WorkerSettings

__all__ = ["WorkerSettings"]
