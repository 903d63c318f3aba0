"""A small travel agent, the system under test of this example: rule-based (no model, runs offline), it plans
tool calls for a request, runs them against an in-memory hotel catalogue, and returns its answer with the
execution trace it recorded (evaltasks' ``TraceStep`` fields) and the tool calls it made.

Durations come from a simulated clock (each tool has a fixed cost), so the example's scores are the same on
every machine. Two deliberate faults give the agent metrics something to find: when a city has no hotel, the
agent searches again and again with the same arguments (a loop), and a hotel that is sold out fails its booking
(a tool error).

Run alone: ``python examples/agent/agent.py "Book a hotel in Lyon for 2 nights"``.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

HOTELS = {
    "paris": [{"name": "Le Marais", "price": 120}, {"name": "Opera Inn", "price": 95}],
    "lyon": [{"name": "Bellecour", "price": 80}],
    "nice": [{"name": "Promenade", "price": 150, "sold_out": True}],
}
COST_MS = {"plan": 40.0, "search_hotels": 300.0, "book_hotel": 500.0, "get_weather": 150.0}
MAX_SEARCHES = 5


class SoldOut(Exception):
    """The hotel has no room left."""


def search_hotels(city: str) -> list[dict[str, Any]]:
    """The hotels of ``city`` (lower-cased), cheapest first; [] for a city the catalogue lacks."""
    return sorted(HOTELS.get(city.lower(), []), key=lambda hotel: hotel["price"])


def book_hotel(hotel: str, nights: int) -> dict[str, Any]:
    """A booking of ``nights`` at ``hotel``. Raises SoldOut when it has no room."""
    found = next(h for rooms in HOTELS.values() for h in rooms if h["name"] == hotel)
    if found.get("sold_out"):
        raise SoldOut(f"{hotel} is sold out")
    return {"hotel": hotel, "nights": nights, "total": found["price"] * nights}


def get_weather(city: str) -> str:
    """A fixed forecast (the example has no network)."""
    return "sunny" if city.lower() in ("nice", "paris") else "cloudy"


TOOLS = {"search_hotels": search_hotels, "book_hotel": book_hotel, "get_weather": get_weather}


class Recorder:
    """Records steps on a simulated clock: each step starts when the previous one ended."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.clock = 0.0  # seconds

    def step(self, kind: str, name: str, duration_ms: float, parent: str | None, **fields: Any) -> str:
        step_id = f"s{len(self.steps) + 1}"
        self.steps.append(
            {
                "type": kind,
                "step_id": step_id,
                "name": name,
                "timestamp": self.clock,
                "duration_ms": duration_ms,
                "parent_step_id": parent,
                **fields,
            }
        )
        self.clock += duration_ms / 1000.0
        return step_id

    def call(self, name: str, parent: str, **arguments: Any) -> Any:
        """Run tool ``name`` and record it: its output, or its error."""
        try:
            output = TOOLS[name](**arguments)
        except SoldOut as exc:
            self.step(
                "tool_call",
                name,
                COST_MS[name],
                parent,
                input=arguments,
                status="error",
                error=str(exc),
                error_type="SoldOut",
            )
            return None
        self.step("tool_call", name, COST_MS[name], parent, input=arguments, output=output, status="success")
        return output


def run(case: Any) -> dict[str, Any]:
    """The target callable: answer ``case.input`` (a travel request), with the trace and the calls made."""
    request = case.input or ""
    city_match = re.search(r"\bin ([A-Z][a-z]+)", request)
    nights_match = re.search(r"(\d+) nights?", request)
    city = city_match.group(1) if city_match else ""
    nights = int(nights_match.group(1)) if nights_match else 1
    recorder = Recorder()
    agent = recorder.step("agent_step", "travel-agent", 0.0, None)
    plan = ["search_hotels", "book_hotel"] + (["get_weather"] if "weather" in request else [])
    recorder.step("reasoning", "plan", COST_MS["plan"], agent, output=plan)
    hotels: list[dict[str, Any]] = []
    for _ in range(MAX_SEARCHES):  # the fault: the same search again, never a different one
        hotels = recorder.call("search_hotels", agent, city=city) or []
        if hotels:
            break
    answer = f"I found no hotel in {city}."
    if hotels:
        booking = recorder.call("book_hotel", agent, hotel=hotels[0]["name"], nights=nights)
        answer = (
            f"Booked {booking['hotel']} in {city} for {nights} night(s): {booking['total']} EUR."
            if booking
            else f"{hotels[0]['name']} in {city} could not be booked."
        )
    if "get_weather" in plan:
        answer += f" The weather will be {recorder.call('get_weather', agent, city=city)}."
    recorder.steps[0]["duration_ms"] = round(recorder.clock * 1000.0, 3)  # the agent step spans the whole run
    trace = recorder.steps
    calls = [{"name": s["name"], "arguments": s["input"]} for s in trace if s["type"] == "tool_call"]
    return {"output": answer, "execution_trace": trace, "tool_calls": calls, "metadata": {"plan": plan}}


if __name__ == "__main__":
    from types import SimpleNamespace

    print(json.dumps(run(SimpleNamespace(input=" ".join(sys.argv[1:]))), indent=2))
