from django.contrib import admin
from django.urls import path

from conductor_site.views import healthz, metrics
from console.views import admin_login, dispatcher_pause, front_door, overview

urlpatterns = [
    # Also the admin's "View site" link (AdminSite.site_url).
    path("", front_door, name="front-door"),
    # Before the admin's own URLs, which would otherwise answer /admin/overview/ with a 404.
    path("admin/overview/", admin.site.admin_view(overview), name="admin-overview"),
    path("admin/overview/pause/", admin.site.admin_view(dispatcher_pause), name="admin-overview-pause"),
    # The login page with a first-run hint (templates/admin/login.html).
    path("admin/login/", admin_login, name="admin-login"),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
]
