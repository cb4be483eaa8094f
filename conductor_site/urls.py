import re

from django.contrib import admin
from django.urls import path, re_path

from conductor_site.views import favicon, healthz, metrics
from console.failures import failure_groups
from console.purge import purge
from console.views import (
    MOVED_ADMIN_PAGES,
    admin_login,
    dispatcher_pause,
    front_door,
    kind_pause,
    moved_admin_page,
    overview,
)

urlpatterns = [
    # Also the admin's "View site" link (AdminSite.site_url).
    path("", front_door, name="front-door"),
    # Before the admin's own URLs, which would otherwise answer /admin/overview/ with a 404.
    path("admin/overview/", admin.site.admin_view(overview), name="admin-overview"),
    path("admin/overview/pause/", admin.site.admin_view(dispatcher_pause), name="admin-overview-pause"),
    path("admin/overview/pause-kind/", admin.site.admin_view(kind_pause), name="admin-overview-kind-pause"),
    path("admin/failures/", admin.site.admin_view(failure_groups), name="admin-failure-groups"),
    path("admin/overview/purge/", admin.site.admin_view(purge), name="admin-purge"),
    # The login page with a first-run hint (templates/admin/login.html).
    path("admin/login/", admin_login, name="admin-login"),
    # Pages of models that moved to another app, by their old address.
    re_path(
        r"^admin/(?P<old>{})/(?P<rest>.*)$".format("|".join(map(re.escape, MOVED_ADMIN_PAGES))),
        moved_admin_page,
    ),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    # Where a browser looks for an icon when a page names none (the admin's pages name it).
    path("favicon.ico", favicon, name="favicon"),
]
