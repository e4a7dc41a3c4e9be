"""The dashboard's Starlette application: three pages, the JSON they poll, and the static files.

Routes (GET only; the dashboard writes nothing)::

    /                  jobs, filterable by ?team= ?user= ?state=
    /api/jobs          {"jobs": gpuctl list -o json (filtered), "rows": the table's cells, "filters": ...}
    /jobs/{id}         one job: attempts timeline, progress and GPU charts, segments, events, logs
    /api/jobs/{id}     {"status": gpuctl status JOB -o json, "events", "progress", "gpu", "logs", ...}
    /costs             costs by ?by=team|user|gpu|market (and ?since=7d), budgets
    /api/costs         {"report": gpuctl cost report --by BY -o json, "series", "budgets"}
    /static/...        the stylesheet, the page scripts and the vendored chart library

Templates are Jinja2 with autoescape on: every stored text (names, teams, messages, log lines) is shown
as text, never read as HTML.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp

from orchestrator.costs.report import GroupBy, parse_since
from orchestrator.dashboard import data, views
from orchestrator.dashboard.access import HostCheck, SecurityHeaders, TokenGate
from orchestrator.dashboard.timeline import build_timeline
from orchestrator.errors import GpuctlError, NotFoundError, UserError

HERE = Path(__file__).parent
POLL_SECONDS = 3.0
COST_GROUPINGS = (GroupBy.TEAM, GroupBy.USER, GroupBy.GPU, GroupBy.MARKET, GroupBy.JOB)
FILTERS = ("team", "user", "state")
KUBERNETES_NOTE = ("Kubernetes GPUJobs are not shown yet: the dashboard reads this home's job store (jobs of the "
                   "local and SLURM backends); for GPUJobs use `gpuctl list --backend kubernetes`.")  # fmt: skip


class Dashboard:
    """The handlers, over one gpuctl home."""

    def __init__(self, home: Path, poll_seconds: float) -> None:
        self.home = home
        self.poll_seconds = poll_seconds
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
        self.templates = Jinja2Templates(env=env)

    def _page(self, request: Request, name: str, **context: Any) -> Response:
        context.update(
            home=str(self.home), poll_ms=int(self.poll_seconds * 1000), kubernetes_note=KUBERNETES_NOTE
        )
        return self.templates.TemplateResponse(request, name, context)

    # --- jobs -------------------------------------------------------------------------------
    def _jobs(self, request: Request) -> dict[str, Any]:
        docs = data.job_documents(data.open_store(self.home))
        chosen = {k: request.query_params.get(k) or "" for k in FILTERS}
        shown = [d for d in docs if all(not v or str(d.get(k) or "-") == v for k, v in chosen.items())]
        options = {k: sorted({str(d.get(k) or "-") for d in docs}) for k in FILTERS}
        return {
            "jobs": shown,
            "rows": [views.job_row(d) for d in shown],
            "filters": options,
            "chosen": chosen,
        }

    def jobs_page(self, request: Request) -> Response:
        return self._page(request, "jobs.html", **self._jobs(request), fields=views.ROW_FIELDS)

    def jobs_api(self, request: Request) -> Response:
        found = self._jobs(request)
        del found["chosen"]
        return JSONResponse(found)

    # --- one job ----------------------------------------------------------------------------
    def _job(self, request: Request) -> dict[str, Any]:
        detail = data.job_detail(data.open_store(self.home), request.path_params["job_id"])
        doc = detail["status"]
        timeline = build_timeline(doc, detail["events"], datetime.now(UTC))
        return {**detail, "summary": views.job_summary(doc), "segment_rows": views.segment_rows(doc),
                "timeline": timeline.as_json()}  # fmt: skip

    def job_page(self, request: Request) -> Response:
        return self._page(request, "job.html", **self._job(request))

    def job_api(self, request: Request) -> Response:
        return JSONResponse(self._job(request))

    # --- costs ------------------------------------------------------------------------------
    def _costs(self, request: Request) -> dict[str, Any]:
        by = request.query_params.get("by") or GroupBy.TEAM.value
        if by not in {g.value for g in GroupBy}:
            raise UserError(f"no grouping {by!r}", f"use by= one of {', '.join(g.value for g in GroupBy)}")
        since = request.query_params.get("since") or ""
        now = datetime.now(UTC)
        window = parse_since(since, now) if since else None
        return {**data.costs_document(self.home, GroupBy(by), window, now), "by": by, "since": since}

    def costs_page(self, request: Request) -> Response:
        return self._page(
            request, "costs.html", **self._costs(request), groupings=[g.value for g in COST_GROUPINGS]
        )

    def costs_api(self, request: Request) -> Response:
        found = self._costs(request)
        return JSONResponse({k: found[k] for k in ("report", "series", "budgets")})

    # --- errors -----------------------------------------------------------------------------
    async def error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, GpuctlError)
        code = 404 if isinstance(exc, NotFoundError) else 400 if isinstance(exc, UserError) else 503
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": exc.message}, status_code=code)
        return self.templates.TemplateResponse(request, "error.html", {"message": exc.message, "kubernetes_note": ""},
                                               status_code=code)  # fmt: skip


def create_app(home: Path, *, token: str | None = None, allowed_hosts: Iterable[str] | None = None,
               poll_seconds: float = POLL_SECONDS) -> ASGIApp:  # fmt: skip
    """The dashboard over ``home``; ``token``: required on every request; ``allowed_hosts``: the only
    ``Host`` names served (loopback names when bound to loopback; None: any)."""
    board = Dashboard(home, poll_seconds)
    get = ["GET"]
    routes = [
        Route("/", board.jobs_page, methods=get),
        Route("/api/jobs", board.jobs_api, methods=get),
        Route("/jobs/{job_id}", board.job_page, methods=get),
        Route("/api/jobs/{job_id}", board.job_api, methods=get),
        Route("/costs", board.costs_page, methods=get),
        Route("/api/costs", board.costs_api, methods=get),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app: ASGIApp = Starlette(routes=routes, exception_handlers={GpuctlError: board.error})
    if token is not None:
        app = TokenGate(app, token)
    if allowed_hosts is not None:
        app = HostCheck(app, allowed_hosts)
    return SecurityHeaders(app)
