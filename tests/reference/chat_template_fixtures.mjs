// tests/reference/chat_template_fixtures.mjs: oracle fixtures for include/maxtext/tokenizer/jinja.hpp and
// chat_template.hpp, rendered by npm @huggingface/jinja 0.5.11 (the Jinja engine transformers.js uses).
//
// Setup (once, in a scratch folder):  cd SCRATCH && npm install @huggingface/jinja@0.5.11
// Run from the repository root:       NODE_PATH=SCRATCH/node_modules node tests/reference/chat_template_fixtures.mjs [SHARED]
//   (or copy this script into SCRATCH and run it there; SHARED defaults to ../shared)
// Writes tests/fixtures/chat_templates/synthetic.json (small templates written for this project, one per construct,
// with the oracle's output or its error) and tests/fixtures/chat_templates/<model>.json for the real templates in
// SHARED/models/tokenizers/<model>/tokenizer_config.json (conversations, options and the oracle's output; the
// templates themselves are not copied: tests read them from ../shared).
import { createRequire } from "module";
import fs from "fs";
import path from "path";
import crypto from "crypto";
import { fileURLToPath } from "url";

const require = createRequire(path.join(process.env.NODE_PATH || process.cwd(), "x.js"));
let jinja;
try {
  jinja = require("@huggingface/jinja");
} catch {
  jinja = await import("@huggingface/jinja");
}
const { Template } = jinja;
// The version, from the package folder found by walking up from the resolved entry point.
let version = "?";
for (let d = path.dirname(require.resolve("@huggingface/jinja")); d !== path.dirname(d); d = path.dirname(d)) {
  const p = path.join(d, "package.json");
  if (fs.existsSync(p)) {
    const j = JSON.parse(fs.readFileSync(p, "utf8"));
    if (j.name === "@huggingface/jinja") {
      version = j.version;
      break;
    }
  }
}

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");
const shared = process.argv[2] || path.resolve(root, "..", "shared");
const outDir = path.join(root, "tests", "fixtures", "chat_templates");
fs.mkdirSync(outDir, { recursive: true });

function run(template, context) {
  try {
    return { expected: new Template(template).render(context) };
  } catch (e) {
    return { error: String(e.message) };
  }
}

// ------------------------------------------------------------------ synthetic templates, one construct each
const S = [];
const add = (name, template, context = {}) => S.push({ name, template, context, ...run(template, context) });

add("text_only", "Hello, world!\n");
add("trailing_newline_kept_once", "a\n\n");
add("expression_string", "{{ 'a' ~ \"b\" }}");
add("string_escapes", "{{ 'tab\\tnl\\nq\\'dq\\\"bs\\\\ \\x41\\u00e9' }}");
add("adjacent_string_literals", "{{ 'ab' 'cd' }}");
add("integers_and_floats", "{{ 1 }} {{ 1.0 }} {{ 2.50 }} {{ -3 }} {{ -0.0 }} {{ 10 / 4 }} {{ 10 / 5 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 0.1 + 0.2 }} {{ 123456789 * 1000000000000 }}");
add("error_exponent_literal", "{{ 1e3 }}");
add("number_formats", "{{ 1/3 }} {{ 100000000000000000000.0 * 10 }} {{ 0.000001 * 1 }} {{ 0.0000001 * 1 }} {{ 1.5 * 2 }} {{ 3 - 1.5 }} {{ x }} {{ y }} {{ z }}", { x: 2.0, y: 1e-7, z: 123.456 });
add("booleans_and_none", "{{ true }} {{ false }} {{ none }} {{ True }} {{ None }}|{{ undefined_var }}|");
add("comparisons", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 1 == 1.0 }} {{ 'a' == 'a' }} {{ 'a' != 'b' }} {{ 1 == '1' }} {{ true == 1 }} {{ none == x }} {{ [1] == [1] }}");
add("logic", "{{ 1 and 'x' }} {{ 0 and 'x' }} {{ '' or 'y' }} {{ [] or 'empty' }} {{ not [] }} {{ not not 'a' }} {{ x and x.y }}", { x: {} });
add("in_not_in", "{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 2 in [1, 2] }} {{ '2' in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'q' not in {'k': 1} }} {{ 1 in undefined_var }}");
add("concat_plus", "{{ 'n=' + 5 }} {{ 2.0 + 'x' }} {{ [1, 2] + [3] }} {{ 'a' ~ 1.0 ~ true ~ [1, 'b'] }}");
add("unary", "{{ -x }} {{ +x }} {{ -(1.5) }} {{ - true }}", { x: 4 });
add("ternary", "{{ 'yes' if x else 'no' }} {{ 'a' if false else 'b' if true else 'c' }}|{{ 'shown' if false }}|", { x: 1 });
add("list_dict_literals", "{{ [1, 'two', [3]] }} {{ {'a': 1, 'b': {'c': none}} }} {{ [] }} {{ {} }}");
add("attribute_and_item", "{{ m.role }} {{ m['content'] }} {{ m.missing }}|{{ m.missing.deeper }}|{{ l[0] }} {{ l[-1] }} {{ l.1 }} {{ l[9] }}|{{ s[1] }}", { m: { role: "user", content: "hi" }, l: [10, 20, 30], s: "héllo" });
add("slicing", "{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[::2] }} {{ s[1:3] }} {{ s[::-1] }} {{ l[5:] }} {{ l[1:-1] }}", { l: [1, 2, 3, 4], s: "añbc" });
add("if_elif_else", "{% for x in [1, 2, 3, 4] %}{% if x == 1 %}one{% elif x == 2 %}two{% elif x == 3 %}three{% else %}many{% endif %},{% endfor %}");
add("for_loop_variables", "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}");
add("for_else", "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}empty{% endfor %}");
add("for_filter_if", "{% for x in range(10) if x % 3 == 0 %}{{ x }}{{ ',' if not loop.last }}{% endfor %}");
add("for_tuple_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}[{{ k }}]{% endfor %}", { d: { b: 1, a: 2 } });
add("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}");
add("nested_loops", "{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }} {% endfor %}{{ loop.index }}|{% endfor %}");
add("range_forms", "{{ range(3) }} {{ range(1, 4) }} {{ range(10, 0, -3) }} {{ range(0) }}");
add("set_scoping", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set y = 5 %}{% endif %}{{ y }}");
add("set_tuple", "{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c, d = 3, 4 %}{{ c }}{{ d }}");
add("set_block", "{% set body %}Hello {{ name }}!{% endset %}[{{ body }}]", { name: "Ann" });
add("namespace", "{% set ns = namespace(count=0, items=[]) %}{% for x in [1, 2, 3] %}{% set ns.count = ns.count + x %}{% endfor %}{{ ns.count }} {{ ns.items }} {{ ns }}");
add("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}");
add("macro_defaults", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Bo') }} {{ greet('Al', 'Hi') }} {{ greet(name='Cy', punct='?') }}");
add("macro_recursion", "{% macro count(n) %}{{ n }}{% if n > 0 %}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(5) }}");
add("macro_kwargs_varargs", "{% macro f(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, x=4) }}");
add("macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}");
add("macro_caller_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}<{{ item }}>{% endcall %}");
add("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}");
add("whitespace_control", "a  {%- if true -%}  b  {%- endif -%}  c\n  {{- ' d ' -}}  e {# note #} f {#- trimmed -#} g");
add("lstrip_trim_blocks", "<ul>\n    {% for x in [1, 2] %}\n    <li>{{ x }}</li>\n    {% endfor %}\n</ul>\n  {{ 'expr keeps indentation' }}\n");
add("comments", "a{# a comment with {{ braces }} #}b{#- strip -#}  c");
add("generation_tag", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}\n{% endif %}{% endfor %}", { messages: [{ role: "user", content: "q" }, { role: "assistant", content: "a" }] });
add("raise_exception", "{% if x != 1 %}{{ raise_exception('x must be 1, got ' ~ x) }}{% endif %}ok", { x: 2 });
add("raise_exception_not_taken", "{% if x != 1 %}{{ raise_exception('bad') }}{% endif %}ok", { x: 1 });
add("tests_types", "{{ x is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ i is number }} {{ i is integer }} {{ f is integer }} {{ l is iterable }} {{ s is iterable }} {{ d is mapping }} {{ d is iterable }} {{ b is boolean }} {{ b is true }} {{ b is false }} {{ range is callable }} {{ l is sequence }} {{ s is not string }}", { x: 1, n: null, s: "s", i: 3, f: 1.5, l: [], d: {}, b: true });
add("tests_odd_even_case", "{{ 3 is odd }} {{ 4 is even }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }}");
add("filter_trim_case", "[{{ '  pad \\n' | trim }}] {{ 'MiXed' | upper }} {{ 'MiXed' | lower }} {{ 'hello wORLD foo_bar x1y' | title }} {{ 'hello World' | capitalize }}");
add("filter_length_count", "{{ 'héllo😀' | length }} {{ [1, 2, 3] | length }} {{ {'a': 1} | length }} {{ 'abc'.length }} {{ [1, 2].length }}");
add("filter_tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(separators=(',', ':')) }}|{{ 'é😀\"\\n' | tojson }}|{{ 'é😀' | tojson(ensure_ascii=true) }}|{{ d | tojson(sort_keys=true) }}|{{ [] | tojson(indent=2) }}|{{ none | tojson }}|{{ undefined_var | tojson }}", { d: { z: 1, a: [1, 2.5, { b: null }], t: true, s: "x", e: {}, f: 2.0 } });
add("filter_join", "{{ ['a', 'b', 'c'] | join(', ') }} {{ [1, 2.5, none, true] | join('-') }} {{ 'abc' | join('.') }} {{ ['x', 'y'] | join }}");
add("filter_first_last_list", "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ [1, 2] | list }} {{ [3, 1, 2] | reverse }}");
add("error_first_of_empty", "{{ [] | first }}");
add("error_print_tuple", "{{ (1, 2) }}");
add("filter_default", "{{ missing | default('dflt') }} {{ '' | default('empty', true) }} {{ '' | default('empty') }} {{ 0 | default(5, boolean=true) }} {{ x | default('unused') }}", { x: "set" });
add("filter_items_dictsort", "{{ d | items }} {{ d | dictsort }} {{ d | dictsort(reverse=true) }} {{ d | dictsort(by='value') }}", { d: { b: 2, A: 3, c: 1 } });
add("filter_int_float_abs_string", "{{ '42' | int }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '2.5' | float }} {{ 3 | float }} {{ -3 | abs }} {{ -2.5 | abs }} {{ 3.9 | int }} {{ 5 | string }} {{ 2.0 | string }} {{ true | string }} {{ [1, 'a'] | string }} {{ true | int }}");
add("filter_indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(width=1, first=true, blank=true) }}");
add("filter_replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'abc' | replace('', '-') }}");
add("filter_selectattr_rejectattr_map", "{{ l | selectattr('on') | map(attribute='n') | list }} {{ l | rejectattr('on') | map(attribute='n') | join(',') }} {{ l | selectattr('n', 'equalto', 'b') | list | length }} {{ l | map(attribute='missing', default='d') | list }} {{ l | map(attribute='sub.k') | list }}", { l: [{ n: "a", on: true, sub: { k: 1 } }, { n: "b", on: false }, { n: "c", on: true, sub: { k: 3 } }] });
add("filter_unique_sort", "{{ [3, 1, 3, 2, 1] | unique | list }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ l | sort(attribute='k') | map(attribute='k') | list }}", { l: [{ k: 2 }, { k: 1 }] });
add("filter_safe_chain", "{{ ' Hi ' | trim | upper | safe }}");
add("string_methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.upper() }}|{{ s.lower() }}|{{ 'ab cd'.title() }}|{{ 'ab'.capitalize() }}", { s: "  Mixed Case \n" });
add("string_split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a b  c'.split(none, 1) }} {{ 'x</think>y</think>z'.split('</think>')[-1] }}");
add("string_starts_ends_replace", "{{ s.startswith('<tool') }} {{ s.endswith('>') }} {{ s.startswith(('x', '<')) }} {{ s.replace('tool', 'T') }} {{ s.replace('o', '0', 1) }}", { s: "<tool_response>" });
add("dict_methods", "{{ d.keys() }} {{ d.values() }} {{ d.items() }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }}", { d: { a: 1, b: [2] } });
add("dict_items_loop", "{% for k, v in d | dictsort %}{{ k }}:{{ v | tojson }};{% endfor %}", { d: { y: [1], x: { z: "w" } } });
add("unicode_text", "{{ greeting }} — ünïcödé ✓ 日本語 😀 {{ greeting | length }}", { greeting: "¡Hola!" });
add("json_input_numbers", "{{ a }} {{ b }} {{ c }} {{ a is integer }} {{ b is integer }} {{ c is number }} {{ big }}", { a: 1, b: 2.0, c: 0.5, big: 12345678901234 });
add("object_truthiness", "{{ 'e' if {} else 'n' }}{{ 'e' if [] else 'n' }}{{ 'e' if '' else 'n' }}{{ 'e' if 0 else 'n' }}{{ 'e' if 0.0 else 'n' }}{{ 'e' if none else 'n' }}{{ 'e' if namespace() else 'n' }}");
add("print_containers", "{{ [1, 'a', none, undefined_var, [true]] }} {{ {'k': undefined_var} }}");
add("loop_over_string_error", "{% for c in 'abc' %}{{ c }}{% endfor %}");
add("dotted_call_chain", "{{ '  A,B '.strip().lower().split(',') }}");
add("multiline_set_and_expr_whitespace", "{%- set x = [\n  1,\n  2,\n] -%}\n{{- x | length -}}\n");
add("in_operator_precedence", "{{ 'a' in 'abc' and 'z' not in 'abc' }} {{ not 'a' in 'b' }}");
add("filter_on_undefined_default", "{{ (undefined_var | default([])) | length }}");
add("member_of_none_and_number", "{{ n.x }}|{{ 5.x }}|", { n: null });
add("string_number_concat_tilde", "{{ 1 ~ 2 }} {{ 1.5 ~ '' }} {{ none ~ 'x' if false else 'skip' }}");
add("object_literal_nested_braces", "{{ {'a': {'b': {'c': 1}}} }}");
add("strftime_percent_only", "{{ strftime_now('%%') }}");
// JavaScript semantics the oracle keeps (where Python Jinja would differ).
add("js_loose_equality", "{{ 1 == true }} {{ '1' == true }} {{ 'true' == true }} {{ [] == '' }} {{ [1] == 1 }} {{ none == false }} {{ 0 == '' }} {{ ' 12 ' == 12 }} {{ '0x10' == 16 }} {{ undefined_var == none }} {{ a == a }} {{ [1, 2] == [1, 2] }} {{ {} == {} }}", { a: [1] });
add("js_number_edges", "{{ 5 / 0 }} {{ -5 / 0 }} {{ 10 % 0 }} {{ 2 ** 0.5 }} {{ 2 ** 100 }} {{ 1000000000000000000000 }} {{ 0.1 * 3 }} {{ 100 / 3 }} {{ 1.0 ~ '' }} {{ 1.0 | string }} {{ [1.0, 2.5] }} {{ 9007199254740993 }} {{ 1.0 | tojson }}");
add("dynamic_scope_macros", "{% set x = 5 %}{% macro m() %}{{ x }}{{ item }}{% endmacro %}{% set x = 6 %}{{ m() }}|{% for item in [1, 2] %}{{ m() }}{% endfor %}|{% macro setter() %}{% set x = 99 %}{{ x }}{% endmacro %}{{ setter() }}{{ x }}");
add("undefined_chains", "[{{ nope.a.b }}][{{ messages[0]['role'] }}][{{ loop }}][{{ 1 if none }}][{{ not none }}][{{ x is none }}][{{ caller }}]", { messages: [] });
add("unicode_whitespace", "[{{ '\\u00a0x\\u3000' | trim }}] {{ 'a\\u00a0b c'.split() }} [{{ '\\u2003y '.strip() }}]");
add("json_control_chars", "{{ s | tojson }} {{ s | tojson(ensure_ascii=true) }} {{ {'k\"ey': 'v'} }}", { s: "\u0001\u007f\u2028é\t" });
add("split_maxsplit_edges", "{{ 'a-b-c'.split('-', 0) }} {{ '  a b  '.split(none, 0) }} {{ 'a b c'.split(none, 1) }} {{ 'a--b'.split('-') }}");
add("replace_kwargs", "{{ 'abcb' | replace('b', 'x', count=1) }} {{ 'abcb'.replace('b', 'y', 1) }}");
add("tojson_indent_nested", "{{ d | tojson(indent=2) }}|{{ d | tojson(indent=0) }}|{{ d | tojson(indent=none) }}", { d: { a: [1, [2, 3], {}], b: { c: [] } } });
add("trailing_commas", "{{ [1, 2,] }} {{ {'a': 1,} }} {{ f(1,) if false else 'ok' }}");
add("for_over_dict_methods", "{% for v in d.values() %}{{ v }}{% endfor %} {% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %} {% for k, v in d | items %}{{ k }}{% endfor %}", { d: { x: 1, y: 2 } });
add("filters_on_messages", "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | map(attribute='role') | join(', ') }} {{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='content') | first }} {{ messages[-1]['content'].split()[0] }}", { messages: [{ role: "user", content: "one two" }, { role: "assistant", content: "three" }, { role: "user", content: "four five" }] });
add("generation_tag_variants", "A\n  {%- generation -%}  B  {% endgeneration %}\n C {% generation %}\nD{%- endgeneration %} E");
add("lstrip_trim_variants", "x\n\t{# c #}\ny\n  {%- if true %}\nz\n  {% endif -%}\n  w {{ 1 }}\n");
add("object_key_order", "{{ d | tojson }} {{ d.keys() | list }}", { d: { b: 1, "2": 2, a: 3, "10": 4, "01": 5 } });
add("is_tests_on_odd_types", "{{ ns is mapping }} {{ ns is sequence }} {{ 1 is lower }} {{ none is string }} {{ f is number }}", { f: 1.5 });
add("nested_namespace_updates", "{% set ns = namespace(items=[], n=0) %}{% for i in range(3) %}{% set ns.items = ns.items + [i * 2] %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.items }} {{ ns.n }}");
add("set_in_if_inside_for", "{% set last = none %}{% for m in ['a', 'b'] %}{% if m == 'a' %}{% set last = m %}{% endif %}{{ last }}{% endfor %}|{{ last }}");
add("string_concat_adjacent_and_tilde", "{{ \"a\" \"b\" ~ \"c\" }} {{ 'x' + 'y' * 1 if false else 'z' }}");
add("error_statement_plus", "{%+ if true %}x{% endif %}");
add("error_escape_filter", "{{ 'x' | e }}");
add("error_string_times", "{{ 'ab' * 2 }}");
add("error_bool_plus", "{{ true + 1 }}");
add("error_empty_split", "{{ 'abc'.split('') }}");
add("error_length_of_undefined", "{{ nothing | length }}");
add("error_in_none", "{{ 'x' in none }}");
add("error_bool_compare", "{{ true > false }}");
add("error_unknown_method_call", "{{ 'x'.zfill(3) }}");
add("error_macro_extra_args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}");
add("error_macro_unknown_kwarg", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}");
// Errors: the oracle rejects these too (a syntax error, an unsupported construct, a runtime error).
add("error_unclosed_if", "{% if true %}never closed");
add("error_unknown_statement_include", "{% include 'other.j2' %}");
add("error_unknown_statement_extends", "{% extends 'base' %}");
add("error_bad_token", "{{ a $ b }}");
add("error_unterminated_string", "{{ 'abc }}");
add("error_unknown_filter", "{{ 'x' | frobnicate }}");
add("error_unknown_test", "{{ x is frobnicated }}", { x: 1 });
add("error_call_undefined", "{{ nothing() }}");
add("error_round_filter", "{{ 2.5 | round }}");
add("error_map_without_attribute", "{{ [1] | map('string') | list }}");
add("error_undefined_arithmetic", "{{ missing + 1 }}");
add("error_unclosed_comment", "a {# never closed");
add("error_endfor_without_for", "{% endfor %}");
add("error_default_without_parens", "{{ x | default }}");
add("error_string_lt", "{{ 'a' < 'b' }}");
add("error_set_attr_on_dict", "{% set d = {} %}{% set d.x = 1 %}");

fs.writeFileSync(path.join(outDir, "synthetic.json"), JSON.stringify({ oracle: `@huggingface/jinja ${version}`, cases: S }, null, 1) + "\n");
console.log(`synthetic: ${S.length} cases (${S.filter((c) => c.error !== undefined).length} errors)`);

// ------------------------------------------------------------------ real templates over generated conversations
// The context a chat render gets (chat_template.hpp builds the same): messages, add_generation_prompt, tools and
// documents (null when not given), the special tokens the config names (as strings), then extra variables.
function tokenText(t) {
  if (typeof t === "string") return t;
  if (t && typeof t === "object" && typeof t.content === "string") return t.content;
  return undefined;
}
function chatContext(config, messages, opts) {
  const ctx = { messages, add_generation_prompt: !!opts.add_generation_prompt, tools: opts.tools ?? null, documents: null };
  for (const k of ["bos_token", "eos_token", "unk_token", "pad_token"]) {
    const v = tokenText(config[k]);
    if (v !== undefined) ctx[k] = v;
  }
  return { ...ctx, ...(opts.extra || {}) };
}

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the weather for a city.",
    parameters: { type: "object", properties: { city: { type: "string", description: "City name, e.g. \"Paris\"" }, days: { type: "integer" } }, required: ["city"] },
  },
};
const calc = { type: "function", function: { name: "add", description: "Add two numbers", parameters: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } } } } };

const conversations = [
  { name: "single_user", messages: [{ role: "user", content: "Hello!" }] },
  { name: "system_user", messages: [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "What is 2+2?" }] },
  {
    name: "multi_turn",
    messages: [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello! How can I help?" },
      { role: "user", content: "Tell me a joke." },
      { role: "assistant", content: "Why did the chicken cross the road?" },
      { role: "user", content: "Why?" },
    ],
  },
  { name: "no_system_multi_turn", messages: [{ role: "user", content: "A" }, { role: "assistant", content: "B" }, { role: "user", content: "C" }] },
  { name: "unicode_quotes_newlines", messages: [{ role: "user", content: "  Ünïcödé: 日本語, emoji 😀, quotes \"double\" and 'single', back\\slash\n\nNew paragraph\twith tab.  " }, { role: "assistant", content: "Réponse: «ok» — done.\n" }, { role: "user", content: "<b>tags</b> & {{ braces }} {% not jinja %}" }] },
  { name: "empty_content", messages: [{ role: "user", content: "" }, { role: "assistant", content: "" }, { role: "user", content: "x" }] },
  { name: "whitespace_content", messages: [{ role: "system", content: "\n sys \n" }, { role: "user", content: "\n\n  padded  \n" }] },
  { name: "ends_with_assistant", messages: [{ role: "user", content: "Q" }, { role: "assistant", content: "A" }] },
];
const thinking = [
  { name: "assistant_with_think_tags", messages: [{ role: "user", content: "2+3?" }, { role: "assistant", content: "<think>\nAdd them.\n</think>\n\n5" }, { role: "user", content: "and 4+4?" }] },
  { name: "last_assistant_with_think", messages: [{ role: "user", content: "2+3?" }, { role: "assistant", content: "<think>\nAdd them.\n</think>\n\n5" }] },
  { name: "reasoning_content_field", messages: [{ role: "user", content: "Why?" }, { role: "assistant", content: "Because.", reasoning_content: "Think first." }] },
];
const toolConv = [
  {
    name: "tool_call_and_result",
    messages: [
      { role: "system", content: "You can use tools." },
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "get_weather", arguments: { city: "Paris", days: 2 } } }] },
      { role: "tool", content: "{\"temp\": 21, \"sky\": \"clear\"}" },
      { role: "assistant", content: "It is 21°C and clear." },
      { role: "user", content: "Thanks" },
    ],
  },
  {
    name: "two_tool_calls_string_arguments",
    messages: [
      { role: "user", content: "Add 1+2 and weather in Rome" },
      { role: "assistant", content: "Let me check.", tool_calls: [{ type: "function", function: { name: "add", arguments: "{\"a\": 1, \"b\": 2}" } }, { type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Rome\"}" } }] },
      { role: "tool", content: "3" },
      { role: "tool", content: "sunny" },
    ],
  },
];
const deepseekTools = [
  {
    name: "tool_calls_null_content",
    messages: [
      { role: "system", content: "S1" },
      { role: "system", content: "S2" },
      { role: "user", content: "Weather?" },
      { role: "assistant", content: null, tool_calls: [{ type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Paris\"}" } }, { type: "function", function: { name: "add", arguments: "{\"a\": 1}" } }] },
      { role: "tool", content: "sunny" },
      { role: "tool", content: "1" },
      { role: "assistant", content: "Sunny, and 1." },
    ],
  },
  {
    name: "ends_with_tool_output",
    messages: [
      { role: "user", content: "Weather?" },
      { role: "assistant", content: null, tool_calls: [{ type: "function", function: { name: "get_weather", arguments: "{}" } }] },
      { role: "tool", content: "rain" },
    ],
  },
];
const gemmaExtra = [
  { name: "content_parts", messages: [{ role: "system", content: [{ type: "text", text: "Sys part" }] }, { role: "user", content: [{ type: "image" }, { type: "text", text: " Describe this. " }] }] },
  { name: "roles_not_alternating", messages: [{ role: "user", content: "a" }, { role: "user", content: "b" }] },
];

const models = {
  llama3: conversations,
  qwen3: [...conversations, ...thinking, ...toolConv],
  deepseek_v3: [...conversations, ...deepseekTools],
  gemma3: [...conversations, ...gemmaExtra],
};
for (const [model, convs] of Object.entries(models)) {
  const cfgPath = path.join(shared, "models", "tokenizers", model, "tokenizer_config.json");
  const config = JSON.parse(fs.readFileSync(cfgPath, "utf8"));
  const template = config.chat_template;
  const cases = [];
  for (const conv of convs) {
    const variants = [{ add_generation_prompt: false }, { add_generation_prompt: true }];
    if (model === "qwen3") {
      variants.push({ add_generation_prompt: true, tools: [weather, calc] });
      variants.push({ add_generation_prompt: true, extra: { enable_thinking: false } });
    }
    for (const opts of variants) {
      const tag = [opts.add_generation_prompt ? "gen" : "nogen", opts.tools ? "tools" : "", opts.extra ? "nothink" : ""].filter(Boolean).join("_");
      cases.push({ name: `${conv.name}/${tag}`, messages: conv.messages, options: opts, ...run(template, chatContext(config, conv.messages, opts)) });
    }
  }
  const sha = crypto.createHash("sha256").update(template).digest("hex");
  fs.writeFileSync(path.join(outDir, `${model}.json`), JSON.stringify({ oracle: `@huggingface/jinja ${version}`, model, template_sha256: sha, cases }, null, 1) + "\n");
  console.log(`${model}: ${cases.length} cases (${cases.filter((c) => c.error !== undefined).length} errors)`);
}
