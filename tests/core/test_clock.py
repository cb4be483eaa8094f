import datetime as dt

import pytest

from core.clock import datetime_from_ms, ms_from_datetime


@pytest.mark.parametrize("moment,ms", [
    (dt.datetime(1970, 1, 1, tzinfo=dt.UTC), 0),
    (dt.datetime(2026, 11, 29, 12, 0, 0, 250_999, tzinfo=dt.UTC), 1_795_953_600_250),
    (dt.datetime(2026, 11, 29, 13, 0, 0, 250_000, tzinfo=dt.timezone(dt.timedelta(hours=1))), 1_795_953_600_250),
])
def test_datetimes_and_epoch_milliseconds_convert_exactly(moment, ms):
    assert ms_from_datetime(moment) == ms
    assert datetime_from_ms(ms) == moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    assert datetime_from_ms(ms).tzinfo == dt.UTC
