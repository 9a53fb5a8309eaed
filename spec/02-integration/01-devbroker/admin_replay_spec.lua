-- Replay the real mqadmin 4.9.4 session (spec/fixtures/wire/09_mqadmin_session) against the
-- development broker: the client frames that built the broker's state (topic creation, the
-- sends, the consumer's heartbeats, pulls and offset commits, the slow producer's heartbeat) in
-- their captured order, and every admin request the development broker serves; each admin
-- answer must carry the real broker's response code, header field names and body shape (field
-- names, value kinds, map values; see admin.lua). Values (offsets, counters, times) are this
-- broker's own and are checked by admin_spec.lua.
--
-- The real broker also held topics and groups of earlier runs (Acc*, Lat*, ...). Requests about
-- those are compared only when the real broker answered them with an error (a counter that
-- never counted, "The stats <..> <..> not exist"): this broker, which never saw them, must too.
local helpers = require "helpers"
local wire = require "02-integration.01-devbroker.wire"
local admin = require "02-integration.01-devbroker.admin"
local cjson = require "cjson"

-- The admin request codes this spec checks.
local SERVED = {[26] = true, [28] = true, [200] = true, [202] = true, [204] = true, [206] = true,
                [207] = true, [215] = true, [216] = true, [300] = true, [315] = true, [317] = true,
                -- consumerProgress without -g: GET_CONSUME_STATS and GET_CONSUMER_CONNECTION_LIST
                -- for every group of a %RETRY% topic in the topic list
                [208] = true, [203] = true}
-- Skipped here: served by the message index (devbroker_index.c), whose spec
-- (query_replay_spec.lua) replays these frames of the same fixture: QUERY_MESSAGE (12,
-- queryMsgByKey / queryMsgByUniqueKey) and VIEW_MESSAGE_BY_ID (33, queryMsgById).
local INDEX_CODES = {[12] = true, [33] = true}
-- Client frames replayed to build the state the admin requests are about.
local STATE = {[17] = true, [310] = true, [34] = true, [11] = true, [15] = true, [35] = true}
local AWAITED = {[17] = true, [310] = true, [34] = true, [35] = true}

-- Names of the capture's own session: CapAdminT, CapAdminDelT, cap_admin_g, cap_admin_sub_g,
-- rmqtools_producer (with %RETRY% / %DLQ% / @ forms).
local function ours(name) return name:find("[Cc]ap_?[Aa]dmin") or name:find("rmqtools_producer") end

local function own_state(ext)
  for _, k in ipairs({"topic", "consumerGroup", "statsKey", "groupName", "producerGroup"}) do
    if ext[k] and not ours(ext[k]) then return false end
  end
  return true
end

local keyset = admin.keyset

describe("devbroker replay of the mqadmin 4.9.4 session", function()
  lazy_setup(function() wire.quiet() end)

  it("answers every served admin request like the real broker", function()
    local dir = helpers.fixtures .. "/wire/09_mqadmin_session/"
    local index = cjson.decode(helpers.read_file(dir .. "index.json"))
    local by_seq = {}
    for _, f in ipairs(index.frames) do by_seq[f.seq] = f end
    local db, ns, lib = wire.start("--delay-scale 0.001")
    helpers.defer(function() lib.rmq_devbroker_stop(db) end)
    local baddr = wire.broker_addr(db, 0)
    local conns = {}
    helpers.defer(function() for _, c in pairs(conns) do c:close() end end)
    local function conn_for(f)
      if not conns[f.conn] then
        local target = f.direction:match("namesrv$") and ns or baddr
        conns[f.conn] = assert(wire.connect(target))
      end
      return conns[f.conn]
    end

    local problems, compared, skipped = {}, {}, 0
    local function note(f, what) problems[#problems + 1] = f.file .. ": " .. what end
    for _, f in ipairs(index.frames) do
      local code = f.request_code
      if f.kind ~= "response" and (SERVED[code] or STATE[code]) and not INDEX_CODES[code] then
        local c = conn_for(f)
        local raw = helpers.read_file(dir .. f.file)
        local req = wire.decode(raw)
        assert(c:send_raw(raw))
        local real = f.response_seq and by_seq[f.response_seq]
        if STATE[code] then
          if AWAITED[code] and real then
            local r = c:wait_response(req.opaque, 5 * helpers.scale)
            assert(r, "no answer to state frame " .. f.file)
            assert(r.code == real.header.code,
                   f.file .. ": state frame answered " .. r.code .. " " .. tostring(r.remark))
          end
        else
          local resp, err = c:wait_response(req.opaque, 10 * helpers.scale)
          local rh = real.header
          local own = own_state(req.extFields or {})
          if not resp then
            note(f, "no response (" .. tostring(err) .. ")")
          elseif own or rh.code ~= 0 then
            compared[code] = (compared[code] or 0) + 1
            if resp.code ~= rh.code then
              note(f, ("code %d, real %d (%s / %s)"):format(resp.code, rh.code,
                                                            tostring(resp.remark),
                                                            tostring(rh.remark)))
            end
            if rh.code ~= 0 and resp.remark ~= rh.remark then
              note(f, "remark " .. tostring(resp.remark) .. ", real " .. tostring(rh.remark))
            end
            if keyset(resp.extFields) ~= keyset(rh.extFields) then
              note(f, "header fields {" .. keyset(resp.extFields) .. "}, real {" ..
                      keyset(rh.extFields) .. "}")
            end
            local rbody = wire.decode(helpers.read_file(dir .. real.file)).body or ""
            if code == 26 then
              -- properties text: the same keys in the same order
              local function keys(s)
                local k = {}
                for line in s:gmatch("([^\n]*)\n") do k[#k + 1] = line:match("^([^=]*)=") end
                return table.concat(k, ",")
              end
              if keys(resp.body) ~= keys(rbody) then note(f, "properties keys differ") end
              if resp.body:sub(-1) ~= "\n" then note(f, "properties text not ended by a newline") end
            elseif #rbody > 0 then
              local ok, a = pcall(admin.parse, resp.body or "")
              if not ok then
                note(f, "our body is not (fast)JSON: " .. tostring(a))
              else
                local sa, sb = admin.shape(a), admin.shape(admin.parse(rbody))
                if sa ~= sb then note(f, "body " .. sa .. "\n   real " .. sb) end
              end
            elseif (resp.body or "") ~= "" then
              note(f, "unexpected body " .. resp.body:sub(1, 80))
            end
          else
            skipped = skipped + 1
          end
        end
      end
    end
    assert.same({}, problems)
    -- Every served code was compared at least once; the ones skipped (`skipped`) are the
    -- successful answers about topics and groups of the real broker's earlier runs.
    for code in pairs(SERVED) do
      assert.is_true((compared[code] or 0) > 0, "request code " .. code .. " never compared")
    end
  end)
end)
