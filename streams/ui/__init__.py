"""The incident explorer (``faultstream ui``) and the pieces the HTML report shares with it.

* :mod:`streams.ui.app` -- the Starlette app: pages, the JSON endpoint of the live list, login
  and the approve / reject path (:func:`create_ui_app`);
* :mod:`streams.ui.queries` -- the read-only, parameterised ClickHouse queries
  (:class:`~streams.ui.queries.IncidentStore`);
* :mod:`streams.ui.views` -- what each page shows, computed from records (pure);
* :mod:`streams.ui.render` -- the Jinja2 environment over ``templates/`` (autoescape on) and the
  packaged assets in ``static/`` (no CDN, no external font);
* :mod:`streams.ui.commands` -- decisions signed and published as ``faultstream remediation
  approve | reject`` does;
* :mod:`streams.ui.settings` -- ``FAULTSTREAM_UI_*`` settings.

:func:`streams.ui.app.serve` runs the app with uvicorn until interrupted.
"""

