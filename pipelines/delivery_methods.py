"""The ways a text reaches a chat, and which to try in what order (SPEC §6.1).

A method is a registered ``DeliveryMethodSpec``: the plugin capability it
needs, the frame it sends, how it reads the plugin's answer, and the
``error_code`` answers that mean "this method cannot work here, try the
next one". ``methods_for`` puts them in order for one conversation: its
own override (set by an operator in the admin), else
``CONDUCTOR_DELIVERY_METHODS`` for its platform, else the platform's own
order. ``pipelines.deliveries.deliver_text`` walks that order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.registry import Registry
from ingest.protocol import Capability, DeliveryErrorCode
from platforms import parse_delivery_methods
from platforms.registry import (
    EVERY_PLATFORM,
    DeliveryMethod,
    DeliveryTarget,
    DeliveryVerdict,
    PlatformAdapter,
    ProxyAnswer,
)
from platforms.wire import (
    excerpt,
)


@dataclass(frozen=True)
class DeliveryMethodSpec:
    """One delivery method: what it needs of the plugin, what it sends, how it reads the answer."""

    name: str
    capability: str  # the plugin must announce it in its hello
    frame_type: str
    # Answers that say this method cannot work here: the attempt moves on to the next method.
    falls_through_on: frozenset[str]

    def frame_fields(self, adapter: PlatformAdapter, target: DeliveryTarget) -> dict[str, Any]:
        """The frame's fields beyond those every delivery frame has."""
        raise NotImplementedError

    def read(self, adapter: PlatformAdapter, answer: Mapping[str, Any]) -> DeliveryVerdict:
        """The plugin's stored answer (``DeliveryRequest.result``) as a verdict."""
        raise NotImplementedError


class HttpMethod(DeliveryMethodSpec):
    """``browser.proxy_delivery``: the app's own request, built by its adapter, made inside the page."""

    def frame_fields(self, adapter: PlatformAdapter, target: DeliveryTarget) -> dict[str, Any]:
        return {"request": adapter.build_request(target).as_frame()}

    def read(self, adapter: PlatformAdapter, answer: Mapping[str, Any]) -> DeliveryVerdict:
        return adapter.read_answer(ProxyAnswer.from_result(answer))


class DomMethod(DeliveryMethodSpec):
    """``browser.dom_delivery``: typed into the conversation's composer and sent, as a person would.

    Delivered only when the plugin saw the new user turn appear (the frame
    parser refuses ``ok: true`` without that evidence); every other answer
    is retryable.
    """

    def frame_fields(self, adapter: PlatformAdapter, target: DeliveryTarget) -> dict[str, Any]:
        return {}

    def read(self, adapter: PlatformAdapter, answer: Mapping[str, Any]) -> DeliveryVerdict:
        evidence = answer.get("evidence") or {}
        if answer.get("ok") and evidence.get("user_turn_seen") is True:
            return DeliveryVerdict.delivered()
        detail = excerpt(str(answer.get("error") or "")) or "no error given"
        return DeliveryVerdict.retryable(f"{adapter.name} composer delivery failed in the page: {detail}")


class DeliveryMethodRegistry(Registry[DeliveryMethodSpec]):
    what = "delivery method"


delivery_methods = DeliveryMethodRegistry()
delivery_methods.register(HttpMethod(
    name=DeliveryMethod.HTTP, capability=Capability.PROXY_DELIVERY, frame_type="browser.proxy_delivery",
    falls_through_on=frozenset({
        DeliveryErrorCode.PAGE_VALUE_MISSING, DeliveryErrorCode.NO_TAB, DeliveryErrorCode.BLOCKED,
    }),
))
delivery_methods.register(DomMethod(
    name=DeliveryMethod.DOM, capability=Capability.DOM_DELIVERY, frame_type="browser.dom_delivery",
    # No tab for the composer means none for any method: the attempt ends there.
    falls_through_on=frozenset({DeliveryErrorCode.PAGE_VALUE_MISSING, DeliveryErrorCode.BLOCKED}),
))


def method_names_for(*, adapter: PlatformAdapter, conversation_methods: str) -> tuple[str, ...]:
    """The delivery methods to try for a conversation, in order, by name.

    ``conversation_methods``: the conversation's own override ("" for none),
    checked when an operator saved it.
    """
    if conversation_methods:
        wanted = parse_delivery_methods(conversation_methods)
    else:
        configured = settings.CONDUCTOR_DELIVERY_METHODS
        wanted = configured.get(adapter.name) or configured.get(EVERY_PLATFORM) or adapter.delivery_methods
    # Only what the platform performs: a page site has no request of its own ("*": "http,dom" means dom there).
    return tuple(name for name in wanted if name in adapter.performs) or adapter.delivery_methods


def methods_for(*, adapter: PlatformAdapter, conversation_methods: str) -> list[DeliveryMethodSpec]:
    return [
        delivery_methods.get(name)
        for name in method_names_for(adapter=adapter, conversation_methods=conversation_methods)
    ]
