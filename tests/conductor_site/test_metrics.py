import datetime as dt
from unittest import mock

import pytest
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from automation.kinds import kinds
from automation.models import TaskStatus
from automation.services import transitions as tr
from automation.services.dispatcher_state import dispatcher_worker_heartbeat, lease_loss_record
from conductor_site.metrics import DeliveryOutcome, delivery_outcome
from console.views import OVERVIEW_PERMISSION
from conversations.models import Message
from ingest.models import DeliveryRequest, Instruction
from ingest.selectors.deliveries import DeliveryState
from tests.factories import (
    LEASE_MS,
    OWNER,
    T0,
    InstructionFactory,
    MessageFactory,
    PluginClientFactory,
    make_staff,
    make_task,
    task_lease,
)

URL = "/metrics"
TOKEN = "scrape-" + "s" * 40
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
PROMETHEUS_ACCEPT = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1"
# One aggregated query per family that reads the database (see conductor_site.metrics).
QUERIES_PER_SCRAPE = 11  # one a family, and one read of the last hour's finished tasks


@pytest.fixture
def token(settings):
    settings.CONDUCTOR_METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(client, token=TOKEN):
    response = client.get(
        URL, HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_ACCEPT=PROMETHEUS_ACCEPT
    )
    assert response.status_code == 200, response.content
    return response


def samples(response) -> dict[str, dict[tuple, float]]:
    """Family name -> {sorted label pairs: value}, as Prometheus would parse the body."""
    return {
        family.name: {tuple(sorted(s.labels.items())): s.value for s in family.samples}
        for family in text_string_to_metric_families(response.content.decode())
    }


# --- access ----------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("accept", [None, PROMETHEUS_ACCEPT, "*/*"])
def test_a_request_without_session_or_token_gets_401_unless_it_is_a_browser(
    client, token, accept
):
    headers = {"HTTP_ACCEPT": accept} if accept else {}
    response = client.get(URL, **headers)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.django_db
def test_a_browser_without_a_session_goes_to_the_admin_login_and_back(client, token):
    response = client.get(URL, HTTP_ACCEPT=BROWSER_ACCEPT)
    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=/metrics"


@pytest.mark.django_db
def test_a_logged_in_user_who_is_not_staff_is_refused(client, token):
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_user("visitor", password=None))
    assert client.get(URL, HTTP_ACCEPT=PROMETHEUS_ACCEPT).status_code == 401


@pytest.mark.django_db
def test_staff_without_the_permission_to_view_tasks_gets_403(client, token):
    client.force_login(
        make_staff("staff", "ingest.view_deliveryrequest", password=None)
    )
    assert client.get(URL, HTTP_ACCEPT=BROWSER_ACCEPT).status_code == 403


@pytest.mark.django_db
def test_staff_with_the_permission_to_view_tasks_gets_the_figures(client, settings):
    settings.CONDUCTOR_METRICS_TOKEN = ""
    client.force_login(make_staff("staff", OVERVIEW_PERMISSION, password=None))
    response = client.get(URL)
    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    assert "no-store" in response["Cache-Control"]
    assert "conductor_tasks" in samples(response)


@pytest.mark.django_db
def test_the_right_bearer_token_gets_the_figures_without_a_session(client, token):
    response = scrape(client)
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    assert "conductor_tasks" in samples(response)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header",
    [
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}",
        "Bearer ",
        f"Basic {TOKEN}",
        TOKEN,
        "Bearer jeton-été-ü",  # not ASCII: refused, not a 500
    ],
)
def test_a_wrong_bearer_token_gets_401_even_with_a_staff_session(client, token, header):
    client.force_login(make_staff("staff", OVERVIEW_PERMISSION, password=None))
    response = client.get(URL, HTTP_AUTHORIZATION=header, HTTP_ACCEPT=BROWSER_ACCEPT)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.django_db
@pytest.mark.parametrize("header", ["Bearer ", "Bearer", "bearer  "])
def test_token_access_is_off_while_the_setting_is_empty(client, settings, header):
    settings.CONDUCTOR_METRICS_TOKEN = ""
    assert client.get(URL, HTTP_AUTHORIZATION=header).status_code == 401


@pytest.mark.django_db
def test_a_scrape_is_503_when_the_database_does_not_answer(client, token):
    with mock.patch(
        "conductor_site.metrics.task_event_counts",
        side_effect=OperationalError("connection refused"),
    ):
        response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 503
    assert response.content == b"The database does not answer: connection refused\n"


def test_metrics_only_answers_get(client):
    assert client.post(URL).status_code == 405


# --- the figures ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_empty_database_gives_zeros_and_no_tick_age(client, token):
    figures = samples(scrape(client))

    assert set(figures["conductor_tasks"].values()) == {0}
    # Every status of every kind, and failed twice: as a fault and as a rejection.
    assert len(figures["conductor_tasks"]) == len(kinds.names()) * (len(TaskStatus.values) + 1)
    assert set(figures["conductor_task_claims"].values()) == {0}
    assert set(figures["conductor_task_lease_expiries"].values()) == {0}
    assert figures["conductor_delivery_requests"] == {
        (("method", method), ("outcome", outcome)): 0
        for method in ("dom", "http")
        for outcome in DeliveryOutcome
    }
    assert figures["conductor_messages"] == {}
    assert figures["conductor_instructions"] == {
        (("status", s),): 0 for s in Instruction.Status.values
    }
    assert figures["conductor_plugin_clients_connected"] == {(): 0}
    assert figures["conductor_dispatcher_last_tick_age_seconds"] == {}


@pytest.mark.django_db
def test_tasks_by_kind_and_status_claims_and_lease_expiries(client, token):
    make_task(TaskStatus.PENDING, kind="test.local")
    make_task(TaskStatus.SUCCEEDED, kind="test.local")
    make_task(TaskStatus.SUCCEEDED, kind="test.local")
    make_task(TaskStatus.BLOCKED, kind="test.instruction")
    make_task(TaskStatus.FAILED, kind="test.instruction")
    # Leased twice: its first lease expired before it started, and it was claimed again.
    twice = make_task(TaskStatus.LEASED, kind="test.instruction")
    tr.task_reclaim_unstarted(twice.pk, actor="reclaim", now=T0 + LEASE_MS + 1)
    task_lease(
        twice.pk,
        lease_owner=OWNER,
        lease_until=T0 + 3 * LEASE_MS,
        now=T0 + LEASE_MS + 2,
    )
    # Interrupted while running: its worker died.
    interrupted = make_task(TaskStatus.RUNNING, kind="test.local")
    tr.task_reclaim_interrupted(
        interrupted.pk, actor="reclaim", retry_at=None, now=T0 + LEASE_MS + 1
    )

    figures = samples(scrape(client))

    tasks = {labels: n for labels, n in figures["conductor_tasks"].items() if n}
    assert tasks == {
        (("kind", "test.local"), ("reason", ""), ("status", "pending")): 1,
        (("kind", "test.local"), ("reason", "succeeded"), ("status", "succeeded")): 2,
        (("kind", "test.local"), ("reason", "fault"), ("status", "failed")): 1,
        (("kind", "test.instruction"), ("reason", ""), ("status", "blocked")): 1,
        (("kind", "test.instruction"), ("reason", "fault"), ("status", "failed")): 1,
        (("kind", "test.instruction"), ("reason", ""), ("status", "leased")): 1,
    }
    claims = {labels: n for labels, n in figures["conductor_task_claims"].items() if n}
    assert claims == {(("kind", "test.local"),): 3, (("kind", "test.instruction"),): 3}
    expiries = {
        labels: n for labels, n in figures["conductor_task_lease_expiries"].items() if n
    }
    assert expiries == {
        (("kind", "test.instruction"), ("status", "pending")): 1,
        (("kind", "test.local"), ("status", "failed")): 1,
    }
    assert (
        figures["conductor_task_lease_expiries"][
            (("kind", "test.local"), ("status", "retry_wait"))
        ]
        == 0
    )


def delivery(*, method, answered=True, delivered=False, error_code=None, ok=False):
    client = PluginClientFactory()
    task = make_task(kind="test.local")
    result = {
        "ok": ok,
        "status": 200 if ok else None,
        "body": None,
        "error": None,
        "error_code": error_code,
    }
    return DeliveryRequest.objects.create(
        task=task,
        client=client,
        method=method,
        delivered=delivered,
        sent_at=T0,
        answered_at=T0 + 10 if answered else None,
        result=result if answered else None,
    )


@pytest.mark.django_db
def test_deliveries_by_method_and_outcome(client, token):
    delivery(method="http", delivered=True, ok=True)
    delivery(method="http", delivered=True, ok=True)
    delivery(method="http", error_code="page_value_missing")  # http falls through on it
    delivery(method="http")  # answered, not delivered: failed
    delivery(method="dom", error_code="no_tab")  # dom does not fall through on it
    delivery(method="dom", answered=False)

    figures = samples(scrape(client))

    assert figures["conductor_delivery_requests"] == {
        (("method", "http"), ("outcome", "delivered")): 2,
        (("method", "http"), ("outcome", "fell_through")): 1,
        (("method", "http"), ("outcome", "failed")): 1,
        (("method", "http"), ("outcome", "unanswered")): 0,
        (("method", "dom"), ("outcome", "delivered")): 0,
        (("method", "dom"), ("outcome", "fell_through")): 0,
        (("method", "dom"), ("outcome", "failed")): 1,
        (("method", "dom"), ("outcome", "unanswered")): 1,
    }


@pytest.mark.parametrize(
    "method,state,error_code,outcome",
    [
        ("http", DeliveryState.DELIVERED, None, "delivered"),
        ("http", DeliveryState.UNANSWERED, None, "unanswered"),
        ("http", DeliveryState.ANSWERED, None, "failed"),
        ("http", DeliveryState.ANSWERED, "no_tab", "fell_through"),
        ("dom", DeliveryState.ANSWERED, "no_tab", "failed"),
        ("dom", DeliveryState.ANSWERED, "blocked", "fell_through"),
        (
            "carrier-pigeon",
            DeliveryState.ANSWERED,
            "blocked",
            "failed",
        ),  # no longer registered
    ],
)
def test_delivery_outcome_asks_the_method_what_falls_through(
    method, state, error_code, outcome
):
    assert (
        delivery_outcome(method=method, state=state, error_code=error_code) == outcome
    )


@pytest.mark.django_db
def test_messages_instructions_clients_and_the_newest_heartbeat(client, token, settings):
    settings.CONDUCTOR_PING_INTERVAL_SECONDS = 20
    now = timezone.now()
    MessageFactory(source=Message.Source.PLUGIN, role=Message.Role.ASSISTANT)
    MessageFactory(
        source=Message.Source.CONDUCTOR, role=Message.Role.USER, dedupe_key=None
    )
    message = MessageFactory(source=Message.Source.REPLAY, role=Message.Role.ASSISTANT)
    InstructionFactory(message=message, status=Instruction.Status.SUCCEEDED)
    InstructionFactory(message=message, status=Instruction.Status.SUCCEEDED)
    InstructionFactory(message=message, status=Instruction.Status.REJECTED)
    PluginClientFactory(connected=True, last_seen_at=now)
    PluginClientFactory(
        connected=True, last_seen_at=now - dt.timedelta(seconds=41)
    )  # expired
    PluginClientFactory(connected=True, last_seen_at=now, enabled=False)
    dispatcher_worker_heartbeat(owner=OWNER, server="server-a", now=T0)

    with mock.patch("conductor_site.metrics.now_ms", return_value=T0 + 2500):
        figures = samples(scrape(client))

    assert figures["conductor_messages"] == {
        (("role", "assistant"), ("source", "plugin")): 1,
        (("role", "user"), ("source", "conductor")): 1,
        (("role", "assistant"), ("source", "replay")): 1,
    }
    instructions = {
        labels: n for labels, n in figures["conductor_instructions"].items() if n
    }
    assert instructions == {(("status", "succeeded"),): 2, (("status", "rejected"),): 1}
    assert figures["conductor_plugin_clients_connected"] == {(): 1}
    assert figures["conductor_dispatcher_last_tick_age_seconds"] == {(): 2.5}


@pytest.mark.django_db
def test_a_scrape_takes_the_same_few_queries_however_many_rows_there_are(client, token):
    with CaptureQueriesContext(connection) as empty:
        scrape(client)
    assert len(empty) == QUERIES_PER_SCRAPE

    for n, status in enumerate(
        [TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.PENDING] * 4
    ):
        task = make_task(status, kind=["test.local", "test.instruction"][n % 2])
        DeliveryRequest.objects.create(
            task=task,
            client=PluginClientFactory(connected=True, last_seen_at=timezone.now()),
            method=["http", "dom"][n % 2],
            sent_at=T0,
            answered_at=T0 if n % 3 else None,
            result={"ok": False, "error_code": "no_tab"} if n % 3 else None,
        )
        InstructionFactory(
            status=Instruction.Status.values[n % len(Instruction.Status.values)]
        )
    dispatcher_worker_heartbeat(owner=OWNER, server="server-a", now=T0)

    with CaptureQueriesContext(connection) as full:
        figures = samples(scrape(client))
    assert len(full) == QUERIES_PER_SCRAPE
    assert sum(figures["conductor_tasks"].values()) == 12
    assert sum(figures["conductor_delivery_requests"].values()) == 12


@pytest.mark.django_db
def test_a_rejection_is_counted_apart_from_faults(client, token):
    make_task(TaskStatus.FAILED, kind="test.instruction")
    held = [make_task(TaskStatus.BLOCKED, kind="test.instruction") for _ in range(3)]

    def failed(reason):
        figures = samples(scrape(client))["conductor_tasks"]
        return figures[(("kind", "test.instruction"), ("reason", reason), ("status", "failed"))]

    assert (failed("fault"), failed("rejected")) == (1, 0)
    for task in held:
        tr.task_reject(task.pk, actor="alice", reason="no")
    assert (failed("fault"), failed("rejected")) == (1, 3)


@pytest.mark.django_db
def test_duration_histograms_cover_the_last_hour_of_finished_tasks(client, token):
    now = T0 + 10_000
    fresh = make_task(TaskStatus.SUCCEEDED, kind="test.local")
    type(fresh).objects.filter(pk=fresh.pk).update(execute_after=now - 3000, started_at=now - 2950, finished_at=now - 2000)
    old = make_task(TaskStatus.SUCCEEDED, kind="test.local")
    type(old).objects.filter(pk=old.pk).update(execute_after=0, started_at=1, finished_at=now - 2 * 3_600_000)

    with mock.patch("conductor_site.metrics.now_ms", return_value=now):
        body = scrape(client).content.decode()
    families = {family.name: family for family in text_string_to_metric_families(body)}

    def bucket(name, le):
        return next(
            s.value for s in families[name].samples
            if s.name.endswith("_bucket") and s.labels == {"kind": "test.local", "le": le}
        )

    # Waited 50 ms, ran 950 ms; the task finished two hours ago is outside the window.
    assert bucket("conductor_task_queue_wait_seconds", "0.025") == 0
    assert bucket("conductor_task_queue_wait_seconds", "0.05") == 1
    assert bucket("conductor_task_run_seconds", "0.5") == 0
    assert bucket("conductor_task_run_seconds", "1.0") == 1
    assert bucket("conductor_task_run_seconds", "+Inf") == 1


@pytest.mark.django_db
def test_lost_leases_are_a_counter_per_kind_with_zeros_for_every_kind(client, token):
    lease_loss_record(kind="test.local")
    lease_loss_record(kind="test.local")
    families = {
        family.name: family for family in text_string_to_metric_families(scrape(client).content.decode())
    }
    lost = {s.labels["kind"]: s.value for s in families["conductor_leases_lost"].samples if s.name.endswith("_total")}
    assert families["conductor_leases_lost"].type == "counter"
    assert lost["test.local"] == 2 and lost["instruction.deliver"] == 0
