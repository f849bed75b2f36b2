"""The guest and wire lanes' reading of DAPL's programs' output, checked on text they printed."""
from kdat_harness.dapl import QUIT_REPLY_FLUSHED, without_quit_reply_race

# what dapltest's server prints after `dapltest -T Q` (libdaplofa on rxe)
QUIT_PART = ("Server: Transaction Test Finished for this client\n"
             "Test Error: Server_Info_Send-reaping DTO problem, status = FAILURE\n"
             "DT_cs_Server (ofa-v2-kdat0):  Exiting.\n")


def test_the_quit_reply_race_line_goes_and_every_other_line_stays():
    left = without_quit_reply_race(QUIT_PART)
    assert QUIT_REPLY_FLUSHED not in left
    assert left.splitlines() == ["Server: Transaction Test Finished for this client",
                                 "DT_cs_Server (ofa-v2-kdat0):  Exiting."]


def test_any_other_error_of_the_quit_stays():
    other = ("Test Error: Server_Info_Recv-reaping DTO problem, status = FAILURE\n"
             "DT_cs_Server: dat_ep_disconnect fails: DAT_INVALID_STATE\n")
    assert without_quit_reply_race(QUIT_PART + other).splitlines()[-2:] == other.splitlines()
