"""The NFS mount options of the shared store's FUSE client and the retry arithmetic they imply
(machinery/sharedstore/mountopts.py; nfs(5) "timeo" / "retrans": linear backoff, capped at 600 ds)."""

import pytest

from machinery.sharedstore.mountopts import MountOptionError, MountOptions

GUIDE_OPTIONS = "soft,timeo=20,retrans=2,lookupcache=none,sync,intr,proto=tcp"   # A-MQ FT guide 3.1, NFSv4 mount options


def test_guide_options_parse_to_their_meaning():
    options = MountOptions.parse(GUIDE_OPTIONS)
    assert options == MountOptions(soft=True, timeo=20, retrans=2, lookupcache="none", sync=True, vers=4)
    assert MountOptions.parse(options.render()) == options


def test_defaults_are_nfs5_defaults_over_tcp():
    options = MountOptions.parse("")
    assert (options.soft, options.timeo, options.retrans, options.vers) == (False, 600, 2, 4)


def test_waits_grow_by_timeo_after_each_retransmission():
    assert MountOptions.parse("timeo=20,retrans=2").waits() == [2.0, 4.0, 6.0]
    assert MountOptions.parse("timeo=7,retrans=4").waits() == [0.7, 1.4, 2.1, 2.8, 3.5]


def test_waits_are_capped_at_600_deciseconds():
    assert MountOptions.parse("timeo=250,retrans=3").waits() == [25.0, 50.0, 60.0, 60.0]
    assert MountOptions.parse("hard,timeo=400").waits(attempts=5)[-1] == 60.0


def test_guide_detection_figure_follows_from_the_options():
    # the guide's "about 12 s" is not written into the model: it is 2 s + 4 s + 6 s
    assert MountOptions.parse(GUIDE_OPTIONS).soft_failure_after() == pytest.approx(12.0), \
        "FT-SHARED-8 soft,timeo=20,retrans=2 must give up after 12 s"
    # and other settings give other figures from the same rule
    assert MountOptions.parse("soft,timeo=10,retrans=3").soft_failure_after() == pytest.approx(1 + 2 + 3 + 4)
    assert MountOptions.parse("soft,timeo=600,retrans=2").soft_failure_after() == pytest.approx(180.0)


@pytest.mark.parametrize("text, named", [
    ("timeo=abc", "timeo"), ("timeo=0", "timeo"), ("retrans=-1", "retrans"), ("lookupcache=some", "lookupcache"),
    ("vers=2", "vers"), ("soft=1", "soft"), ("noac", "noac"), ("proto=udp", "proto"), ("intr=1", "intr"),
])
def test_bad_option_is_refused_naming_it(text, named):
    with pytest.raises(MountOptionError, match=named):
        MountOptions.parse(text)


def test_lookupcache_pos_is_positive_and_vers_accepts_minor_versions():
    assert MountOptions.parse("lookupcache=pos").lookupcache == "positive"
    assert MountOptions.parse("vers=4.1").vers == 4
    assert MountOptions.parse("nfsvers=3").vers == 3
