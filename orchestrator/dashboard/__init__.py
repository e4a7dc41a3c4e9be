"""`gpuctl dashboard`: a read-only web view of the job store and the ledger (docs/dashboard.md).

It sits at the CLI layer and builds every number with the functions the CLI uses: a job is the status
document of ``gpuctl status JOB -o json`` (:mod:`orchestrator.cli.status_document`), costs are the
report of ``gpuctl cost report -o json`` (:mod:`orchestrator.costs.report`). Pages are rendered on
the server (Starlette and Jinja2, autoescaped) and refreshed by a small script polling JSON endpoints;
charts use uPlot, vendored under ``static/vendor`` (nothing is fetched from elsewhere at run time).

:mod:`orchestrator.dashboard.command` needs only the base install; the web stack is the ``dashboard``
extra and is imported when the command runs.
"""
