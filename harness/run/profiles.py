"""Hypothesis profiles for ferry, and what each means for a fuzz campaign.

Load one with ``--hypothesis-profile ferry-ci`` (pytest) or
``settings.load_profile("ferry-thorough")``. The profile sets the Hypothesis settings of the
property tests and, through :func:`campaign_defaults`, the budget and example length of
ferry's own fuzz campaigns.
"""

from __future__ import annotations

from typing import TypedDict

from hypothesis import HealthCheck, settings


class Profile(TypedDict):
    """A ferry profile's Hypothesis settings and campaign budget."""

    max_examples: int
    stateful_step_count: int
    budget_s: float


class CampaignDefaults(TypedDict):
    """What a profile sets for a fuzz campaign."""

    budget_s: float
    steps_per_example: int


PROFILES: dict[str, Profile] = {
    # CI: bounded and quiet; failures are printed with their blob for reproduction
    "ferry-ci": {"max_examples": 60, "stateful_step_count": 30, "budget_s": 30.0},
    # a developer's loop: fast feedback
    "ferry-dev": {"max_examples": 20, "stateful_step_count": 20, "budget_s": 10.0},
    # nightly or before a release: long examples, long budgets
    "ferry-thorough": {"max_examples": 1000, "stateful_step_count": 60, "budget_s": 600.0},
}


def register() -> None:
    """Register the three profiles (idempotent)."""
    for name, p in PROFILES.items():
        settings.register_profile(
            name, max_examples=p["max_examples"], stateful_step_count=p["stateful_step_count"],
            deadline=None, suppress_health_check=[HealthCheck.too_slow],
            print_blob=name == "ferry-ci")


def current() -> str:
    """The name of the Hypothesis profile in force."""
    return settings.get_current_profile_name()


def campaign_defaults() -> CampaignDefaults:
    """Budget and steps per example for a campaign under the current profile."""
    name = current()
    p = PROFILES.get(name)
    if p is None:  # a user's own profile: take its step count, ferry-ci's budget
        return {"budget_s": PROFILES["ferry-ci"]["budget_s"],
                "steps_per_example": settings.default.stateful_step_count}
    return {"budget_s": p["budget_s"], "steps_per_example": p["stateful_step_count"]}


register()
