"""Keep channels-lite's tables on their own SQLite file, and nothing else there."""

CHANNELS_APP = "channels_lite"
CHANNELS_DATABASE = "channels"


class ChannelLayerRouter:
    def db_for_read(self, model, **hints):
        return CHANNELS_DATABASE if model._meta.app_label == CHANNELS_APP else None

    db_for_write = db_for_read

    def allow_relation(self, obj1, obj2, **hints):
        return None

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        return (app_label == CHANNELS_APP) == (db == CHANNELS_DATABASE)
