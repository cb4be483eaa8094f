import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from automation.dispatcher import Dispatcher
from automation.loop import dispatcher_loop


class Command(BaseCommand):
    help = (
        "Run the dispatcher in the foreground: --once for one tick, --loop (the default) for "
        "the dispatcher loop until stopped."
    )

    def add_arguments(self, parser):
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help="One tick; wait for its tasks; exit.")
        mode.add_argument(
            "--loop", action="store_true",
            help="The dispatcher loop, as serve runs it, until SIGINT or SIGTERM (default). "
                 "It claims and runs tasks beside any other loop.",
        )
        parser.add_argument(
            "--interval", type=float, default=None,
            help="Seconds between ticks (default CONDUCTOR_TICK_SECONDS).",
        )

    def handle(self, *args, once, loop, interval, **options):
        interval = settings.CONDUCTOR_TICK_SECONDS if interval is None else interval
        if interval <= 0:
            raise CommandError("--interval must be greater than 0")
        dispatcher = Dispatcher()
        if once:
            report = dispatcher.tick()
            dispatcher.wait_idle()
            dispatcher.stop(grace=0)
            self.stdout.write(f"reclaimed {len(report.reclaimed)}, ran {len(report.claimed)}")
            return

        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        self.stdout.write(f"dispatcher {dispatcher.owner}: a tick every {interval:g} s; Ctrl-C stops it.")
        report = dispatcher_loop(stop=stop, tick_seconds=interval, dispatcher=dispatcher)
        self.stdout.write(f"stopped after {report.ticks} ticks")
