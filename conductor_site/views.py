from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from conductor_site import health


@never_cache
@require_GET
def healthz(request):
    """Liveness for monitors (SPEC §8): 200 when the database answers, 503 when not."""
    report = health.health_report()
    return JsonResponse(report, status=200 if report["database"] else 503)
