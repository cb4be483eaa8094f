from django import forms
from django.contrib import admin

from automation.models import ToolPolicy
from automation.tools.registry import tools


class ToolPolicyForm(forms.ModelForm):
    tool = forms.ChoiceField(choices=[])

    class Meta:
        model = ToolPolicy
        fields = ["tool", "policy", "client", "conversation", "note"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tool"].choices = [
            (spec.name, f"{spec.name} (default: {spec.default_policy})") for spec in tools
        ]


@admin.register(ToolPolicy)
class ToolPolicyAdmin(admin.ModelAdmin):
    form = ToolPolicyForm
    list_display = ["tool", "policy", "client", "conversation", "note", "updated_at"]
    list_filter = ["policy", "tool"]
    raw_id_fields = ["client", "conversation"]

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_superuser

    has_add_permission = has_change_permission = has_delete_permission = has_view_permission
