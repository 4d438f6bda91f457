"""The Dask or Ray task runner that build-tdi's chunks and build-graph's pair scoring run on: a local cluster,
or the one at an address. Prefect's task runners (prefect-dask, prefect-ray), so each piece of work is a
Prefect task run with its own state and logs."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Literal

ClusterKind = Literal["dask", "ray"]


@dataclass(frozen=True)
class ClusterSpec:
    """Where distributed work runs: ``kind`` dask or ray; an address of a running cluster, or a local one of
    ``local_slots`` worker processes (Dask: one thread each) or CPUs (Ray)."""

    kind: ClusterKind
    dask_address: str | None = None
    ray_address: str | None = None
    local_slots: int = 2

    @property
    def where(self) -> str:
        return self.dask_address or self.ray_address or "(local)"


def cluster_runner(spec: ClusterSpec) -> tuple[Any, Callable[[Any], int]]:
    """The Prefect task runner of ``spec`` and how to count its slots once started. Ray workers get this
    working directory on their ``PYTHONPATH``, so they import the project as the flow does."""
    if spec.kind == "dask":
        from prefect_dask import DaskTaskRunner

        local = {"n_workers": spec.local_slots, "threads_per_worker": 1, "processes": True, "dashboard_address": None}
        runner = DaskTaskRunner(address=spec.dask_address) if spec.dask_address else DaskTaskRunner(cluster_kwargs=local)
        return runner, lambda r: sum(r.client.nthreads().values())
    if spec.kind != "ray":
        raise ValueError(f"cluster kind {spec.kind!r}: dask or ray")
    try:
        import ray
        from prefect_ray import RayTaskRunner
    except ImportError as exc:
        raise RuntimeError(f"task runner 'ray' needs prefect-ray and ray ({exc}): pip install -e '.[ray]'") from None
    init = {"runtime_env": {"env_vars": {"PYTHONPATH": os.getcwd()}}, "include_dashboard": False,
            **({} if spec.ray_address else {"num_cpus": spec.local_slots})}
    return RayTaskRunner(address=spec.ray_address, init_kwargs=init), lambda _: int(ray.cluster_resources().get("CPU", 1))
