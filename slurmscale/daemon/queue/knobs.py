"""The config as the policy's knobs: each pool's (PoolPolicy mirrors PoolKnobs' fields), the
hold planner's, the on-demand buffers a spot pool's fallback keeps, and the spot pools whose
jobs may be given the on-demand partition. Pure: the config in, the policy's types out."""

from __future__ import annotations

from slurmscale.config import CapacityType, Config
from slurmscale.policy.fallback import FallbackRule
from slurmscale.policy.model import BufferRule, PoolKnobs
from slurmscale.policy.reservations import ReservationKnobs


def knobs(cfg: Config) -> tuple[PoolKnobs, ...]:
    """The config's pool policy as the policy's knobs (PoolPolicy mirrors PoolKnobs' fields)."""
    return tuple(
        PoolKnobs(name=p.name, gpus_per_node=p.gpus_per_node, max_nodes=p.max_nodes,
                  min_nodes=p.min_nodes, buffer=buffer_rules(cfg, p.name),
                  release_paid_idle=(p.capacity_reservations is None
                                     or p.capacity_reservations.release_idle),
                  **p.policy.knob_values())
        for p in cfg.pools)


def hold_knobs(cfg: Config) -> ReservationKnobs:
    """The config's reservation settings as the hold planner's knobs."""
    r = cfg.reservations
    return ReservationKnobs(**r.model_dump(exclude={"limit_use_auto"}))


def buffer_rules(cfg: Config, pool: str) -> tuple[BufferRule, ...]:
    """The safety buffers on-demand pool `pool` keeps for the spot pools falling back to it."""
    return tuple(BufferRule(p.name, p.spot.on_demand_buffer, p.spot.warm_on_demand_nodes)
                 for p in cfg.pools if p.fallback_pool == pool
                 and (p.spot.on_demand_buffer or p.spot.warm_on_demand_nodes))


def fallback_rules(cfg: Config) -> tuple[FallbackRule, ...]:
    """The spot pools whose users' spot-only jobs may be given the on-demand partition
    (`spot.allow_partition_rewrite`), and after how long."""
    return tuple(FallbackRule(p.name, p.partition, cfg.pool(p.fallback_pool).partition,
                              p.spot.fallback_after_s)
                 for p in cfg.pools if p.capacity_type is CapacityType.SPOT
                 and p.fallback_pool is not None and p.spot.allow_partition_rewrite)
