import hmac

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.db import DatabaseError
from django.http import HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from conductor_site import health
from conductor_site import metrics as conductor_metrics
from console.views import OVERVIEW_PERMISSION


@require_GET
def favicon(request):
    """The console's icon, for a browser that asks ``/favicon.ico`` (the admin's pages name it themselves)."""
    return HttpResponsePermanentRedirect(static("console/favicon.png"))


@never_cache
@require_GET
def healthz(request):
    """Liveness for monitors (SPEC §8): 200 when the database and the channel layer answer; 503 naming
    the part that does not (``database_error``, ``channel_layer_error``), until it answers again."""
    report = health.health_report()
    return JsonResponse(report, status=200 if health.is_healthy(report) else 503)


@never_cache
@require_GET
def metrics(request):
    """Conductor's figures for Prometheus (``conductor_site.metrics``), read at each scrape.

    A request with an ``Authorization`` header is a scraper's: it gets the
    figures with the bearer token ``CONDUCTOR_METRICS_TOKEN``, and 401 with
    any other header, or when that setting is empty. Without the header, a
    staff session holding the overview's permission gets them, a staff
    member without it 403; anyone else 401, which a scraper reports as an
    error, except a browser (it prefers HTML), which goes to the admin's
    login page and comes back. 503 when the database does not answer.
    """
    if "Authorization" in request.headers:
        if not _bearer_token_matches(request.headers["Authorization"]):
            return _unauthorized("A valid bearer token is needed.")
    elif not (request.user.is_active and request.user.is_staff):
        if request.get_preferred_type(["text/plain", "text/html"]) == "text/html":
            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        return _unauthorized("Log in to the admin as staff, or send a bearer token.")
    elif not request.user.has_perm(OVERVIEW_PERMISSION):
        return HttpResponse(
            "You may not view tasks, so not their metrics either.\n",
            status=403,
            content_type="text/plain",
        )
    try:
        body = generate_latest(conductor_metrics.registry)
    except DatabaseError as exc:
        # Every figure comes from the database: without it there are none to give.
        message = f"The database does not answer: {health.database_error_text(exc)}\n"
        return HttpResponse(message, status=503, content_type="text/plain")
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def _bearer_token_matches(header: str) -> bool:
    """Whether ``header`` is ``Bearer <CONDUCTOR_METRICS_TOKEN>``; never while the setting is empty."""
    expected = settings.CONDUCTOR_METRICS_TOKEN
    scheme, _, token = header.strip().partition(" ")
    if not expected or scheme.lower() != "bearer":
        return False
    # Bytes: compare_digest refuses str with characters beyond ASCII, which a header may hold.
    return hmac.compare_digest(token.strip().encode(), expected.encode())


def _unauthorized(message: str) -> HttpResponse:
    response = HttpResponse(message + "\n", status=401, content_type="text/plain")
    response["WWW-Authenticate"] = 'Bearer realm="conductor metrics"'
    return response
