-- rmqlua test examples/throttle.lua examples/cases/throttle.lua
-- Offline, rmq.pause / rmq.resume / rmq.stop are recorded and checked by expect.pause (seconds,
-- true for "until rmq.resume()", false for "not called"), expect.resume and expect.stop.
return {
  { name = "delivers a job", messages = { { body = "job 1" } },
    expect = { status = "SUCCESS", pause = false, stop = false } },
  { name = "pauses pulling for 10 s when the downstream is busy",
    messages = { { body = "busy: job 2" } },
    expect = { status = "RECONSUME_LATER", delay_level = 1, pause = 10 } },
  { name = "stops on a STOP message", messages = { { tags = "STOP", body = "" } },
    expect = { status = "SUCCESS", stop = true, pause = false } },
}
