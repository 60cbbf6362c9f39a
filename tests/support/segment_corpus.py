"""Segment Spec events, deterministic per seed: ``track``, ``page``, ``identify`` and ``screen``
calls shaped as the Spec shapes them (https://segment.com/docs/connections/spec/), with the parts
real payloads vary in: optional context objects absent or null, fields null, ``app.build`` a
number on some SDKs and a string on others, ``properties.products`` a list of objects, traits as
objects, and keys the Spec does not define (top level, in ``context`` and inside
``context.page``)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

START = datetime(2026, 3, 1)
URLS = [f"https://shop.example/{path}" for path in ("", "cart", "p/1", "p/2", "p/3", "checkout")]
EVENTS = ["Product Viewed", "Product Added", "Order Completed", "Signed Up"]
SCREENS = ["Home", "Cart", "Product"]


def _maybe(rng: random.Random, value: Any, none: float = 0.1) -> Any:
    return None if rng.random() < none else value


def _page(rng: random.Random) -> dict[str, Any]:
    url = rng.choice(URLS)
    page: dict[str, Any] = {
        "url": url,
        "path": "/" + url.split("/", 3)[3],
        "title": _maybe(rng, f"Shop {rng.randrange(4)}"),
        "referrer": _maybe(rng, rng.choice(["https://google.com/", "https://news.example/"]), 0.4),
        "search": rng.choice(["", "?q=shoes", "?utm_source=mail"]),
    }
    if rng.random() < 0.1:
        page["scrollDepth"] = rng.randrange(100)  # not in the Spec: kept in extra
    return page


def _mobile(rng: random.Random, context: dict[str, Any]) -> None:
    ios = rng.random() < 0.5
    context["app"] = {
        "name": "Shop",
        "version": rng.choice(["4.1.0", "4.2.0"]),
        # A number on analytics-ios, a string elsewhere: the preset keeps it VARCHAR.
        "build": rng.choice([412, 420]) if ios else rng.choice(["412", "420"]),
        "namespace": "com.example.shop",
    }
    context["device"] = {
        "id": f"dev-{rng.randrange(50)}",
        "advertisingId": _maybe(rng, f"ad-{rng.randrange(50)}", 0.5),
        "adTrackingEnabled": _maybe(rng, rng.random() < 0.5, 0.3),
        "manufacturer": "Apple" if ios else "Samsung",
        "model": "iPhone15,2" if ios else "SM-G991B",
        "name": _maybe(rng, "phone"),
        "type": "ios" if ios else "android",
    }
    context["os"] = {"name": "iOS" if ios else "Android", "version": _maybe(rng, "17.1")}
    context["network"] = {
        "bluetooth": False,
        "carrier": _maybe(rng, rng.choice(["T-Mobile", "Orange"]), 0.3),
        "cellular": rng.random() < 0.5,
        "wifi": rng.random() < 0.5,
    }
    context["screen"] = {
        "width": rng.choice([390, 412]),
        "height": rng.choice([844, 915]),
        "density": rng.choice([2, 3.0, 2.625]),
    }
    if rng.random() < 0.3:
        context["location"] = {
            "city": rng.choice(["Lyon", "Oslo"]),
            "country": rng.choice(["France", "Norway"]),
            "latitude": 45.76,
            "longitude": rng.choice([4.83, 10]),
            "speed": _maybe(rng, 0, 0.5),
        }


def _context(rng: random.Random, kind: str) -> dict[str, Any] | None:
    if rng.random() < 0.03:
        return None
    context: dict[str, Any] = {
        "library": {
            "name": rng.choice(["analytics.js", "analytics-ios", "analytics-android"]),
            "version": "4.1.0",
        },
        "locale": _maybe(rng, rng.choice(["en-US", "fr-FR"])),
        "ip": f"10.0.{rng.randrange(4)}.{rng.randrange(255)}",
    }
    if kind == "screen" or rng.random() < 0.3:
        _mobile(rng, context)
    else:
        context["page"] = _page(rng)
        context["userAgent"] = "Mozilla/5.0"
        context["timezone"] = _maybe(rng, "Europe/Paris")
    if rng.random() < 0.4:
        context["campaign"] = {
            "name": rng.choice(["spring", "black-friday"]),
            "source": rng.choice(["google", "newsletter"]),
            "medium": _maybe(rng, rng.choice(["cpc", "email"])),
            "term": _maybe(rng, "shoes", 0.6),
            "content": _maybe(rng, "banner", 0.6),
        }
    if rng.random() < 0.2:
        context["traits"] = {"email": f"u{rng.randrange(30)}@example.com", "plan": None}
    if rng.random() < 0.1:
        context["referrer"] = {"id": f"r{rng.randrange(5)}", "type": "dataxu"}
    if rng.random() < 0.1:
        context["active"] = rng.random() < 0.5
    if rng.random() < 0.1:
        context["groupId"] = f"g{rng.randrange(3)}"
    if rng.random() < 0.1:
        context["instance"] = {"id": rng.randrange(9)}  # not in the Spec: kept in extra
    return context


def _products(rng: random.Random) -> list[dict[str, Any]]:
    return [
        {"product_id": f"sku-{rng.randrange(20)}", "price": rng.choice([9.99, 20, None])}
        for _ in range(rng.randrange(4))
    ]


def segment_events(seed: int, count: int) -> list[dict[str, Any]]:
    """``count`` events as Segment delivers them (JSON objects; timestamps ISO 8601 text)."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        kind = rng.choices(["track", "page", "identify", "screen"], weights=[6, 2, 1, 1])[0]
        event: dict[str, Any] = {
            "messageId": f"m-{seed}-{n}",
            "timestamp": (START + timedelta(seconds=rng.randrange(3 * 86400))).isoformat() + "Z",
            "type": kind,
            "anonymousId": _maybe(rng, f"a{rng.randrange(200)}", 0.2),
        }
        if rng.random() < 0.6:
            event["userId"] = f"u{rng.randrange(30)}"
        context = _context(rng, kind)
        if context is not None or rng.random() < 0.5:
            event["context"] = context
        if kind == "track":
            event["event"] = rng.choice(EVENTS)
            properties: dict[str, Any] = {"revenue": _maybe(rng, rng.choice([10, 25.5]))}
            if event["event"] == "Order Completed":
                properties["products"] = _products(rng)
            event["properties"] = properties
        elif kind in ("page", "screen"):
            event["name"] = rng.choice(SCREENS)
            event["properties"] = {"name": event["name"], "tags": ["a", None]}
        else:
            event["traits"] = {"email": f"u{rng.randrange(30)}@example.com", "age": None}
        if rng.random() < 0.5:
            event["integrations"] = {"All": True, "Mixpanel": False}
            event["receivedAt"] = event["timestamp"]
        out.append(event)
    return out
