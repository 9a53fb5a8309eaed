-- The option reference in README.md is the one generated from the option table.
local ffi = require "ffi"
local helpers = require "helpers"

ffi.cdef [[ size_t rmq_conf_describe_markdown(char *out, size_t out_size); ]]

describe("README option reference", function()
  it("equals scripts/gen_options_md output", function()
    local lib = helpers.lib()
    local n = tonumber(lib.rmq_conf_describe_markdown(nil, 0))
    local buf = ffi.new("char[?]", n + 1)
    lib.rmq_conf_describe_markdown(buf, n + 1)
    local generated = ffi.string(buf, n)
    local readme = helpers.read_file(helpers.root .. "/README.md")
    local section = readme:match("<!%-%- OPTIONS%-BEGIN %-%->\n(.-)<!%-%- OPTIONS%-END %-%->")
    assert.is_not_nil(section, "README.md has no OPTIONS-BEGIN/END markers")
    if not generated:match("\n$") then generated = generated .. "\n" end
    assert.are.equal(generated, section,
      "README option reference is stale: run scripts/gen_options_md and paste it between the markers")
  end)
end)
