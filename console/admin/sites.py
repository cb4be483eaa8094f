"""Admin for the chat sites described as data (SPEC §9, "Platforms as data"). Superusers only.

An operator fixes a changed selector here once, for every browser: a saved
description is checked against plugin/sites/schema.json, counted a revision
more, and handed to each plugin at its next hello (``sites_version``). The
admin's log says who changed which parts. Removing a row puts the shipped
file's copy back in force.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin

from console.helpers import SuperuserOnlyMixin
from ingest.models import SiteDescription
from ingest.sites import site_description_delete, site_description_save, site_origin_problems, sites_left_out
from platforms.sites import shipped_site_descriptions, site_description_errors


def changed_parts(old: Any, new: Any, *, path: str = "") -> list[str]:
    """The paths (``answer/streaming``) where ``new`` differs from ``old``, at most two levels deep."""
    if old == new:
        return []
    if isinstance(old, dict) and isinstance(new, dict) and path.count("/") < 1:
        parts = []
        for key in sorted(set(old) | set(new)):
            parts += changed_parts(old.get(key), new.get(key), path=f"{path}/{key}" if path else key)
        return parts
    return [path or "(all)"]


class DescriptionField(forms.JSONField):
    """A JSON field shown indented: a description is read and edited by a person.

    Its initial value is the description itself (a dict), never its JSON
    text: ``prepare_value`` encodes it once, so "Edit a copy" saved unchanged
    is the copy.
    """

    def prepare_value(self, value: Any) -> str:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return json.dumps(value, indent=2, ensure_ascii=False, cls=self.encoder)


class SiteDescriptionForm(forms.ModelForm):
    description = DescriptionField(
        widget=forms.Textarea(attrs={"rows": 36, "cols": 100, "spellcheck": "false"}),
        help_text="The description as plugin/sites/schema.json has it: selectors, the dates they were checked "
                  "and their sources. No field runs code or names a URL to fetch.",
    )

    class Meta:
        model = SiteDescription
        fields = ["name", "description"]

    def clean(self):
        cleaned = super().clean()
        # A row's name is read-only once saved: the instance's then.
        name = cleaned.get("name") or (self.instance.name if self.instance.pk else None)
        description = cleaned.get("description")
        if description is None:
            return cleaned
        # The origins first, each naming the site that has it; the schema's own
        # word on an adapter's origin ("should not be valid under …") says less.
        taken = site_origin_problems(name=name or "", description=description)
        errors = [error for error in site_description_errors(description) if not (taken and error.startswith("origins/"))]
        if taken or errors:
            raise forms.ValidationError([*taken, *(f"Not a valid site description: {error}" for error in errors)])
        if name and description.get("name") != name:
            raise forms.ValidationError(f"The description names the site {description.get('name')!r}, not {name!r}.")
        return cleaned


@admin.register(SiteDescription)
class SiteDescriptionAdmin(SuperuserOnlyMixin, admin.ModelAdmin):
    form = SiteDescriptionForm
    list_display = ["name", "title", "replaces", "in_force", "revision", "updated_at", "updated_by"]
    readonly_fields = ["revision", "updated_at", "updated_by"]
    search_fields = ["name"]

    @admin.display(description="Title")
    def title(self, site: SiteDescription) -> str:
        return site.description.get("title", "") if isinstance(site.description, dict) else ""

    @admin.display(description="In place of")
    def replaces(self, site: SiteDescription) -> str:
        return "the shipped description" if site.name in shipped_site_descriptions() else "(a site of its own)"

    @admin.display(description="In force")
    def in_force(self, site: SiteDescription) -> str:
        # Saved only when no other site had its origins; left out should a race
        # or a removal have brought two onto one origin since (``sites_in_force``).
        # One query a row: an operator keeps a handful of rows.
        why = sites_left_out().get(site.name)
        return f"no: {why}" if why else "yes"

    def get_readonly_fields(self, request, obj=None):
        # A row is a site: renaming it would be another site.
        return [*self.readonly_fields, "name"] if obj is not None else self.readonly_fields

    def get_changeform_initial_data(self, request) -> dict[str, Any]:
        """``?name=perplexity`` starts from the shipped description of that site."""
        initial = super().get_changeform_initial_data(request)
        shipped = shipped_site_descriptions().get(request.GET.get("name", ""))
        if shipped is not None:
            initial["description"] = shipped
        return initial

    def save_model(self, request, obj: SiteDescription, form, change: bool) -> None:
        saved = site_description_save(name=obj.name, description=obj.description, actor=request.user.get_username())
        obj.pk, obj.revision, obj.updated_at, obj.updated_by = (
            saved.pk, saved.revision, saved.updated_at, saved.updated_by
        )

    def delete_model(self, request, obj: SiteDescription) -> None:
        site_description_delete(name=obj.name, actor=request.user.get_username())

    def delete_queryset(self, request, queryset) -> None:
        for name in queryset.values_list("name", flat=True):
            site_description_delete(name=name, actor=request.user.get_username())

    def construct_change_message(self, request, form, formsets, add=False) -> str:
        """Which parts changed (``answer/streaming, composer/input``), from the copy the form started from."""
        before = form.initial.get("description")
        if not isinstance(before, dict):
            before = shipped_site_descriptions().get(form.instance.name, {})
        parts = changed_parts(before, form.instance.description)
        what = ", ".join(parts[:12]) or "nothing"
        return f"{'Added' if add else 'Changed'} {what} (revision {form.instance.revision})"

    def changelist_view(self, request, extra_context=None):
        overridden = set(SiteDescription.objects.values_list("name", flat=True))
        extra_context = {
            **(extra_context or {}),
            "shipped_sites": [
                {"name": name, "title": description["title"], "version": description["version"],
                 "overridden": name in overridden}
                for name, description in shipped_site_descriptions().items()
            ],
        }
        return super().changelist_view(request, extra_context=extra_context)
