-- The option reference in docs/options.md is the one generated from the option table.
local ffi = require "ffi"
local helpers = require "helpers"

ffi.cdef [[ size_t rmq_conf_describe_markdown(char *out, size_t out_size); ]]

describe("docs/options.md option reference", function()
  it("equals scripts/gen_options_md output", function()
    local lib = helpers.lib()
    local n = tonumber(lib.rmq_conf_describe_markdown(nil, 0))
    local buf = ffi.new("char[?]", n + 1)
    lib.rmq_conf_describe_markdown(buf, n + 1)
    local generated = ffi.string(buf, n)
    local doc = helpers.read_file(helpers.root .. "/docs/options.md")
    local section = doc:match("<!%-%- OPTIONS%-BEGIN %-%->\n(.-)<!%-%- OPTIONS%-END %-%->")
    assert.is_not_nil(section, "docs/options.md has no OPTIONS-BEGIN/END markers")
    if not generated:match("\n$") then generated = generated .. "\n" end
    assert.are.equal(generated, section,
      "docs/options.md option reference is stale: run scripts/gen_docs_md")
  end)
end)
