"""A tiny order-lookup service for the order_status.yaml example (and its tests).

    python -m agent.examples.order_api --port 8099        # serves orders.json
    curl -d '{"order_number": "12345"}' localhost:8099/orders/lookup

``POST /orders/lookup`` with ``{"order_number": "..."}`` answers ``{"found", "order_number",
"status", "detail"}``; an unknown number is found=false with a status that reads well in the
example's ``say_result`` ("Order 1 2 3 was not found.").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aiohttp import web

ORDERS = Path(__file__).with_name("orders.json")


def make_app(orders: dict[str, dict] | None = None) -> web.Application:
    table = orders if orders is not None else json.loads(ORDERS.read_text(encoding="utf-8"))

    async def lookup(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": "the body must be JSON"}, status=400)
        number = str(body.get("order_number", "")) if isinstance(body, dict) else ""
        order = table.get(number)
        if order is None:
            return web.json_response({
                "found": False, "order_number": number, "status": "was not found",
                "detail": "Please check the number and try again."})
        return web.json_response({"found": True, "order_number": number, **order})

    app = web.Application()
    app.router.add_post("/orders/lookup", lookup)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="the demo order-lookup service")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8099)
    args = parser.parse_args()
    web.run_app(make_app(), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
