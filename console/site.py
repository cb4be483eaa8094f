"""The admin site as Conductor's console: its name, and its index in the order an operator works.

``ConsoleAdminConfig`` (``console.apps``) makes this the default site, so
``admin.site`` and every ``@admin.register`` use it.
"""

from __future__ import annotations

from django.contrib import admin

# The index and the sidebar, top first: what an operator does (tasks and approvals, the
# conversations they come from, the browsers that carry them, the tools they call), then
# the accounts and the sign-in log. Models of an app not named here follow in Django's order.
APP_ORDER: list[tuple[str, list[str]]] = [
    ("automation", ["automationtask"]),
    ("conversations", ["conversation", "message"]),
    ("ingest", ["pluginclient", "instruction", "toolpolicy", "sitedescription"]),
    ("mcp_servers", ["mcpserver"]),
    ("auth", ["user", "group"]),
    ("axes", []),
]
# django-q2's own tables (its schedules, queued, done and failed tasks): the cluster's
# plumbing, which Conductor drives itself; listed for superusers only, last.
SUPERUSER_ONLY_APPS = {"django_q"}


class ConsoleAdminSite(admin.AdminSite):
    site_header = "Conductor"
    site_title = "Conductor"
    index_title = "Operations"

    def get_app_list(self, request, app_label=None):
        apps = [
            app for app in super().get_app_list(request, app_label)
            if app["app_label"] not in SUPERUSER_ONLY_APPS or request.user.is_superuser
        ]
        rank = {label: n for n, (label, _) in enumerate(APP_ORDER)}
        models = dict(APP_ORDER)
        for app in apps:
            order = models.get(app["app_label"], [])
            app["models"].sort(key=lambda model: (
                order.index(model["object_name"].lower()) if model["object_name"].lower() in order else len(order)
            ))
        return sorted(apps, key=lambda app: rank.get(app["app_label"], len(rank)))
