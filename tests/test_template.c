/* template: the Jinja subset, construct by construct (k_features: each
 * expression, filter, test, method and statement with its expected output,
 * checked against jinja2 with HF's settings -- see template_test_util.h),
 * then what the table cannot show: syntax and runtime errors with their
 * status, message and position, the limits (runaway loops, recursion,
 * nesting, output, memory, steps) stopping hostile templates quickly, the
 * data ranges of the output, the API's edges, allocation failures at every
 * allocation, and renders of one template from several threads at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>

#include "template_test_util.h"

/* The variables the feature table renders with. */
#define FEATURE_CTX "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\"" \
    ": \" Hi\\n\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}, {\"role\": \"user\", \"content\":" \
    " \"How are you?\"}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"" \
    ", \"d\": {\"b\": 1, \"a\": [1, 2.5, \"x\", null, true], \"c\": {\"z\": \"q\\\"uote\", \"y\": \"é\\n\"" \
    "}}, \"s\": \"  Hello, World!  \", \"n\": 7, \"f\": 2.5, \"l\": [3, 1, 2], \"e\": [], \"u\": \"ünï\"," \
    " \"now_unix_s\": 1721952000}"

static const tpl_case k_features[] = {
    {NULL, "{{ 'a' ~ 1 ~ none ~ true }}", NULL, "a1NoneTrue", IX_OK, NULL, NULL},
    {NULL, "{{ \"esc\\t\\\"q\\\"\\\\ \\x41 \\u00e9 \\101\" }}", NULL, "esc\t\"q\"\\ A é A", IX_OK, NULL, NULL},
    {NULL, "{{ 'adj' 'acent' }}", NULL, "adjacent", IX_OK, NULL, NULL},
    {NULL, "{{ 1 + 2 * 3 - 4 / 2 }}", NULL, "5.0", IX_OK, NULL, NULL},
    {NULL, "{{ 7 // 2 }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ -7 // 2 }}", NULL, "-4", IX_OK, NULL, NULL},
    {NULL, "{{ 7 % 3 }}", NULL, "1", IX_OK, NULL, NULL},
    {NULL, "{{ -7 % 3 }}", NULL, "2", IX_OK, NULL, NULL},
    {NULL, "{{ 7.5 // 2 }}", NULL, "3.0", IX_OK, NULL, NULL},
    {NULL, "{{ 2 ** 10 }}", NULL, "1024", IX_OK, NULL, NULL},
    {NULL, "{{ 2 ** -1 }}", NULL, "0.5", IX_OK, NULL, NULL},
    {NULL, "{{ 1 / 3 }}", NULL, "0.3333333333333333", IX_OK, NULL, NULL},
    {NULL, "{{ 0.1 + 0.2 }}", NULL, "0.30000000000000004", IX_OK, NULL, NULL},
    {NULL, "{{ 1e16 }}", NULL, "1e+16", IX_OK, NULL, NULL},
    {NULL, "{{ 1.5e-7 }}", NULL, "1.5e-07", IX_OK, NULL, NULL},
    {NULL, "{{ 100.0 }}", NULL, "100.0", IX_OK, NULL, NULL},
    {NULL, "{{ 1e100 }}", NULL, "1e+100", IX_OK, NULL, NULL},
    {NULL, "{{ -0.0 }}", NULL, "-0.0", IX_OK, NULL, NULL},
    {NULL, "{{ 3 > 2 }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 2 >= 3 }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ 'a' < 'b' }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ [1,2] < [1,3] }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 1 == 1.0 }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ true == 1 }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ none == none }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 1 < 2 < 3 }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 3 > 2 > 2 }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ 'x' if true else 'y' }}", NULL, "x", IX_OK, NULL, NULL},
    {NULL, "{{ 'x' if false else 'y' }}", NULL, "y", IX_OK, NULL, NULL},
    {NULL, "{{ 'x' if false }}", NULL, "", IX_OK, NULL, NULL},
    {NULL, "{{ not true }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ not 0 }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ true and 'a' }}", NULL, "a", IX_OK, NULL, NULL},
    {NULL, "{{ '' or 'b' }}", NULL, "b", IX_OK, NULL, NULL},
    {NULL, "{{ 0 and 1 }}", NULL, "0", IX_OK, NULL, NULL},
    {NULL, "{{ [] or none }}", NULL, "None", IX_OK, NULL, NULL},
    {NULL, "{{ 'ell' in 'hello' }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 2 in [1,2] }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 'b' in d }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 'q' not in d }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 'z' in d.c }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ d.b }}", NULL, "1", IX_OK, NULL, NULL},
    {NULL, "{{ d['b'] }}", NULL, "1", IX_OK, NULL, NULL},
    {NULL, "{{ d.c.z }}", NULL, "q\"uote", IX_OK, NULL, NULL},
    {NULL, "{{ d['c']['y'] }}", NULL, "é\n", IX_OK, NULL, NULL},
    {NULL, "{{ d.a[1] }}", NULL, "2.5", IX_OK, NULL, NULL},
    {NULL, "{{ d.a[-1] }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ d.a.0 }}", NULL, "1", IX_OK, NULL, NULL},
    {NULL, "{{ d.missing }}", NULL, "", IX_OK, NULL, NULL},
    {NULL, "{{ d.missing.more }}", NULL, "", IX_OK, NULL, "jinja2: UndefinedError: 'dict object' has no attribute 'missing'"},
    {NULL, "{{ nope.x.y }}", NULL, "", IX_OK, NULL, "jinja2: UndefinedError: 'nope' is undefined"},
    {NULL, "{{ l[1:] }}", NULL, "[1, 2]", IX_OK, NULL, NULL},
    {NULL, "{{ l[:-1] }}", NULL, "[3, 1]", IX_OK, NULL, NULL},
    {NULL, "{{ l[::-1] }}", NULL, "[2, 1, 3]", IX_OK, NULL, NULL},
    {NULL, "{{ l[::2] }}", NULL, "[3, 2]", IX_OK, NULL, NULL},
    {NULL, "{{ s[2:7] }}", NULL, "Hello", IX_OK, NULL, NULL},
    {NULL, "{{ u[::-1] }}", NULL, "ïnü", IX_OK, NULL, NULL},
    {NULL, "{{ u[1] }}", NULL, "n", IX_OK, NULL, NULL},
    {NULL, "{{ u[-1] }}", NULL, "ï", IX_OK, NULL, NULL},
    {NULL, "{{ 'abcdef'[1:5:2] }}", NULL, "bd", IX_OK, NULL, NULL},
    {NULL, "{{ l[5:] }}", NULL, "[]", IX_OK, NULL, NULL},
    {NULL, "{{ [1, 'a', none, true, 1.5] }}", NULL, "[1, 'a', None, True, 1.5]", IX_OK, NULL, NULL},
    {NULL, "{{ (1, 2) }}", NULL, "(1, 2)", IX_OK, NULL, NULL},
    {NULL, "{{ (1,) }}", NULL, "(1,)", IX_OK, NULL, NULL},
    {NULL, "{{ {'k': 'v', 'n': [1]} }}", NULL, "{'k': 'v', 'n': [1]}", IX_OK, NULL, NULL},
    {NULL, "{{ d }}", NULL, "{'b': 1, 'a': [1, 2.5, 'x', None, True], 'c': {'z': 'q\"uote', 'y': 'é\\n'}}", IX_OK, NULL, NULL},
    {NULL, "{{ s|trim }}", NULL, "Hello, World!", IX_OK, NULL, NULL},
    {NULL, "{{ s|trim('! ') }}", NULL, "Hello, World", IX_OK, NULL, NULL},
    {NULL, "{{ s|length }}", NULL, "17", IX_OK, NULL, NULL},
    {NULL, "{{ l|length }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ d|length }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ u|length }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ undefinedvar|length }}", NULL, "0", IX_OK, NULL, NULL},
    {NULL, "{{ d|tojson }}", NULL, "{\"b\": 1, \"a\": [1, 2.5, \"x\", null, true], \"c\": {\"z\": \"q\\\"uote\", \"y\": \"é\\n\"}}", IX_OK, NULL, NULL},
    {NULL, "{{ d|tojson(indent=2) }}", NULL, "{\n"
     "  \"b\": 1,\n"
     "  \"a\": [\n"
     "    1,\n"
     "    2.5,\n"
     "    \"x\",\n"
     "    null,\n"
     "    true\n"
     "  ],\n"
     "  \"c\": {\n"
     "    \"z\": \"q\\\"uote\",\n"
     "    \"y\": \"é\\n\"\n"
     "  }\n"
     "}", IX_OK, NULL, NULL},
    {NULL, "{{ d.c|tojson(sort_keys=true) }}", NULL, "{\"y\": \"é\\n\", \"z\": \"q\\\"uote\"}", IX_OK, NULL, NULL},
    {NULL, "{{ u|tojson }}", NULL, "\"ünï\"", IX_OK, NULL, NULL},
    {NULL, "{{ u|tojson(ensure_ascii=true) }}", NULL, "\"\\u00fcn\\u00ef\"", IX_OK, NULL, NULL},
    {NULL, "{{ [1,[2,{}],[]]|tojson(indent=1) }}", NULL, "[\n"
     " 1,\n"
     " [\n"
     "  2,\n"
     "  {}\n"
     " ],\n"
     " []\n"
     "]", IX_OK, NULL, NULL},
    {NULL, "{{ \"a\\u0001b\\u007f\"|tojson }}", NULL, "\"a\\u0001b\177\"", IX_OK, NULL, NULL},
    {NULL, "{{ d|items|list }}", NULL, "[('b', 1), ('a', [1, 2.5, 'x', None, True]), ('c', {'z': 'q\"uote', 'y': 'é\\n'})]", IX_OK, NULL, NULL},
    {NULL, "{{ d.c.items()|list }}", NULL, "[('z', 'q\"uote'), ('y', 'é\\n')]", IX_OK, NULL, NULL},
    {NULL, "{{ d.keys()|list }}", NULL, "['b', 'a', 'c']", IX_OK, NULL, NULL},
    {NULL, "{{ d.values()|list }}", NULL, "[1, [1, 2.5, 'x', None, True], {'z': 'q\"uote', 'y': 'é\\n'}]", IX_OK, NULL, NULL},
    {NULL, "{{ l|first }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ l|last }}", NULL, "2", IX_OK, NULL, NULL},
    {NULL, "{{ 'abc'|first }}", NULL, "a", IX_OK, NULL, NULL},
    {NULL, "{{ 'abc'|last }}", NULL, "c", IX_OK, NULL, NULL},
    {NULL, "{{ e|first }}", NULL, "", IX_OK, NULL, NULL},
    {NULL, "{{ s|upper }}", NULL, "  HELLO, WORLD!  ", IX_OK, NULL, NULL},
    {NULL, "{{ s|lower }}", NULL, "  hello, world!  ", IX_OK, NULL, NULL},
    {NULL, "{{ 'hELLo wORLD'|capitalize }}", NULL, "Hello world", IX_OK, NULL, NULL},
    {NULL, "{{ 'hello big-world(x)'|title }}", NULL, "Hello Big-World(X)", IX_OK, NULL, NULL},
    {NULL, "{{ \"they're bill's\"|title }}", NULL, "They're Bill's", IX_OK, NULL, NULL},
    {NULL, "{{ s|replace('l', 'L') }}", NULL, "  HeLLo, WorLd!  ", IX_OK, NULL, NULL},
    {NULL, "{{ s|replace('l', 'L', 2) }}", NULL, "  HeLLo, World!  ", IX_OK, NULL, NULL},
    {NULL, "{{ 'abc'|replace('', '-') }}", NULL, "-a-b-c-", IX_OK, NULL, NULL},
    {NULL, "{{ l|join(', ') }}", NULL, "3, 1, 2", IX_OK, NULL, NULL},
    {NULL, "{{ ['a', 'b']|join }}", NULL, "ab", IX_OK, NULL, NULL},
    {NULL, "{{ M|map(attribute='role')|join('/') }}", NULL, "", IX_OK, NULL, NULL},
    {NULL, "{{ undefinedvar|default('dflt') }}", NULL, "dflt", IX_OK, NULL, NULL},
    {NULL, "{{ ''|default('e', true) }}", NULL, "e", IX_OK, NULL, NULL},
    {NULL, "{{ none|default('n') }}", NULL, "None", IX_OK, NULL, NULL},
    {NULL, "{{ 0|d(5) }}", NULL, "0", IX_OK, NULL, NULL},
    {NULL, "{{ 'abc'|list }}", NULL, "['a', 'b', 'c']", IX_OK, NULL, NULL},
    {NULL, "{{ d|list }}", NULL, "['b', 'a', 'c']", IX_OK, NULL, NULL},
    {NULL, "{{ 42|string }}", NULL, "42", IX_OK, NULL, NULL},
    {NULL, "{{ 4.0|string }}", NULL, "4.0", IX_OK, NULL, NULL},
    {NULL, "{{ none|string }}", NULL, "None", IX_OK, NULL, NULL},
    {NULL, "{{ '12'|int + 1 }}", NULL, "13", IX_OK, NULL, NULL},
    {NULL, "{{ '3.9'|int }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ 'x'|int(7) }}", NULL, "7", IX_OK, NULL, NULL},
    {NULL, "{{ 3.7|int }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ '2.5'|float }}", NULL, "2.5", IX_OK, NULL, NULL},
    {NULL, "{{ 2|float }}", NULL, "2.0", IX_OK, NULL, NULL},
    {NULL, "{{ M|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}", NULL, "[]", IX_OK, NULL, NULL},
    {NULL, "{{ M|rejectattr('role', 'equalto', 'user')|list|length }}", NULL, "0", IX_OK, NULL, NULL},
    {NULL, "{{ M|selectattr('role', '==', 'system')|list|length }}", NULL, "0", IX_OK, NULL, NULL},
    {NULL, "{{ [0, 1, '', 'a', none]|select|list }}", NULL, "[1, 'a']", IX_OK, NULL, NULL},
    {NULL, "{{ [1,2,3,4]|reject('odd')|list }}", NULL, "[2, 4]", IX_OK, NULL, NULL},
    {NULL, "{{ [1,2,3]|select('gt', 1)|list }}", NULL, "[2, 3]", IX_OK, NULL, NULL},
    {NULL, "{{ ['a','b']|map('upper')|list }}", NULL, "['A', 'B']", IX_OK, NULL, NULL},
    {NULL, "{{ [' a ', 'b ']|map('trim')|join }}", NULL, "ab", IX_OK, NULL, NULL},
    {NULL, "{{ l|sort }}", NULL, "[1, 2, 3]", IX_OK, NULL, NULL},
    {NULL, "{{ l|sort(reverse=true) }}", NULL, "[3, 2, 1]", IX_OK, NULL, NULL},
    {NULL, "{{ ['b','A','c']|sort }}", NULL, "['A', 'b', 'c']", IX_OK, NULL, NULL},
    {NULL, "{{ ['b','A','c']|sort(case_sensitive=true) }}", NULL, "['A', 'b', 'c']", IX_OK, NULL, NULL},
    {NULL, "{{ M|sort(attribute='role')|map(attribute='content')|list }}", NULL, "[]", IX_OK, NULL, NULL},
    {NULL, "{{ [1,2,2,3,1]|unique|list }}", NULL, "[1, 2, 3]", IX_OK, NULL, NULL},
    {NULL, "{{ l|sum }}", NULL, "6", IX_OK, NULL, NULL},
    {NULL, "{{ l|max }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ l|min }}", NULL, "1", IX_OK, NULL, NULL},
    {NULL, "{{ [-3]|first|abs }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ l|reverse|list }}", NULL, "[2, 1, 3]", IX_OK, NULL, NULL},
    {NULL, "{{ 'abc'|reverse }}", NULL, "cba", IX_OK, NULL, NULL},
    {NULL, "{{ d.c|dictsort }}", NULL, "[('y', 'é\\n'), ('z', 'q\"uote')]", IX_OK, NULL, NULL},
    {NULL, "{{ 2.5|round }}", NULL, "2.0", IX_OK, NULL, NULL},
    {NULL, "{{ 3.14159|round(2) }}", NULL, "3.14", IX_OK, NULL, NULL},
    {NULL, "{{ 2.7|round(0, 'floor') }}", NULL, "2.0", IX_OK, NULL, NULL},
    {NULL, "{{ '<a & \"b\">'|e }}", NULL, "&lt;a &amp; &#34;b&#34;&gt;", IX_OK, NULL, NULL},
    {NULL, "{{ 'x'|safe }}", NULL, "x", IX_OK, NULL, NULL},
    {NULL, "{{ 'a\\nb\\n\\nc'|indent(2) }}", NULL, "a\n"
     "  b\n"
     "\n"
     "  c", IX_OK, NULL, NULL},
    {NULL, "{{ 'a\\nb'|indent(2, true) }}", NULL, "  a\n"
     "  b", IX_OK, NULL, NULL},
    {NULL, "{{ 'one two  three'|wordcount }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ 'ab'|center(6) }}", NULL, "  ab  ", IX_OK, NULL, NULL},
    {NULL, "{{ '%s and %d%%'|format('x', 3) }}", NULL, "x and 3%", IX_OK, NULL, NULL},
    {NULL, "{{ '%s-%s' % ('a', 1) }}", NULL, "a-1", IX_OK, NULL, NULL},
    {NULL, "{{ 'v=%r' % 'q' }}", NULL, "v='q'", IX_OK, NULL, NULL},
    {NULL, "{{ s.strip() }}", NULL, "Hello, World!", IX_OK, NULL, NULL},
    {NULL, "{{ s.lstrip() }}", NULL, "Hello, World!  ", IX_OK, NULL, NULL},
    {NULL, "{{ s.rstrip() }}", NULL, "  Hello, World!", IX_OK, NULL, NULL},
    {NULL, "{{ 'xxaxx'.strip('x') }}", NULL, "a", IX_OK, NULL, NULL},
    {NULL, "{{ 'a,b,,c'.split(',') }}", NULL, "['a', 'b', '', 'c']", IX_OK, NULL, NULL},
    {NULL, "{{ ' a  b '.split() }}", NULL, "['a', 'b']", IX_OK, NULL, NULL},
    {NULL, "{{ 'a,b,c'.split(',', 1) }}", NULL, "['a', 'b,c']", IX_OK, NULL, NULL},
    {NULL, "{{ 'a,b,c'.rsplit(',', 1) }}", NULL, "['a,b', 'c']", IX_OK, NULL, NULL},
    {NULL, "{{ ' a  b c '.split(none, 1) }}", NULL, "['a', 'b c ']", IX_OK, NULL, NULL},
    {NULL, "{{ ' a  b c '.rsplit(none, 1) }}", NULL, "[' a  b', 'c']", IX_OK, NULL, NULL},
    {NULL, "{{ s.startswith('  He') }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ s.endswith(('x', '  ')) }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 'Hi'.upper() }}", NULL, "HI", IX_OK, NULL, NULL},
    {NULL, "{{ 'Hi'.lower() }}", NULL, "hi", IX_OK, NULL, NULL},
    {NULL, "{{ 'hello world'.title() }}", NULL, "Hello World", IX_OK, NULL, NULL},
    {NULL, "{{ 'hI'.capitalize() }}", NULL, "Hi", IX_OK, NULL, NULL},
    {NULL, "{{ 'aXa'.replace('a', 'b') }}", NULL, "bXb", IX_OK, NULL, NULL},
    {NULL, "{{ 'hello'.find('l') }}", NULL, "2", IX_OK, NULL, NULL},
    {NULL, "{{ 'hello'.rfind('l') }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ 'hello'.find('z') }}", NULL, "-1", IX_OK, NULL, NULL},
    {NULL, "{{ 'hello'.count('l') }}", NULL, "2", IX_OK, NULL, NULL},
    {NULL, "{{ '-'.join(['a','b']) }}", NULL, "a-b", IX_OK, NULL, NULL},
    {NULL, "{{ 'ab\\ncd\\r\\nef'.splitlines() }}", NULL, "['ab', 'cd', 'ef']", IX_OK, NULL, NULL},
    {NULL, "{{ '123'.isdigit() }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 'ab'.isalpha() }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ '  '.isspace() }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ d.get('b') }}", NULL, "1", IX_OK, NULL, NULL},
    {NULL, "{{ d.get('zz') }}", NULL, "None", IX_OK, NULL, NULL},
    {NULL, "{{ d.get('zz', 'dd') }}", NULL, "dd", IX_OK, NULL, NULL},
    {NULL, "{{ d.items()|length }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ n is defined }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ zz is defined }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ zz is undefined }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ none is none }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 's' is string }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 1 is string }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ d is mapping }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ l is mapping }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ l is iterable }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 's' is iterable }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 1 is iterable }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ zz is iterable }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 1 is number }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 1.5 is number }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ true is number }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 1 is integer }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ true is integer }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ 1.5 is float }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ true is boolean }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 4 is even }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 3 is odd }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 9 is divisibleby 3 }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 9 is divisibleby(4) }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ true is true }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 1 is true }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ false is false }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 'a' is eq 'a' }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 3 is gt 2 }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 2 is in [1,2] }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 'abc' is lower }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 'ABC' is upper }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ none is not none }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ 'x' is not string }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ l is sequence }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ range(3)|list }}", NULL, "[0, 1, 2]", IX_OK, NULL, NULL},
    {NULL, "{{ range(1, 10, 3)|list }}", NULL, "[1, 4, 7]", IX_OK, NULL, NULL},
    {NULL, "{{ range(5, 0, -2)|list }}", NULL, "[5, 3, 1]", IX_OK, NULL, NULL},
    {NULL, "{{ range(0)|list }}", NULL, "[]", IX_OK, NULL, NULL},
    {NULL, "{{ 'ab' * 3 }}", NULL, "ababab", IX_OK, NULL, NULL},
    {NULL, "{{ [1] * 2 }}", NULL, "[1, 1]", IX_OK, NULL, NULL},
    {NULL, "{{ 3 * 'x' }}", NULL, "xxx", IX_OK, NULL, NULL},
    {NULL, "{{ [1] + [2] }}", NULL, "[1, 2]", IX_OK, NULL, NULL},
    {NULL, "{{ 'a' + 'b' + 'c' }}", NULL, "abc", IX_OK, NULL, NULL},
    {NULL, "{{ -n }}", NULL, "-7", IX_OK, NULL, NULL},
    {NULL, "{{ +n }}", NULL, "7", IX_OK, NULL, NULL},
    {NULL, "{{ -f }}", NULL, "-2.5", IX_OK, NULL, NULL},
    {NULL, "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ lo"
     "op.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", NULL, "1043TrueFalse4|2132FalseFalse4|3221FalseFalse4|4310FalseTrue4|", IX_OK, NULL, NULL},
    {NULL, "{% for m in messages if m.role == 'user' %}{{ loop.index }}/{{ loop.length }}:{{ m.content|trim }};{"
     "% endfor %}", NULL, "1/2:Hi;2/2:How are you?;", IX_OK, NULL, NULL},
    {NULL, "{% for x in e %}no{% else %}empty{% endfor %}", NULL, "empty", IX_OK, NULL, NULL},
    {NULL, "{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %"
     "}{{ x }}{% endfor %}", NULL, "13", IX_OK, NULL, NULL},
    {NULL, "{% for k, v in d.c.items() %}{{ k }}={{ v|tojson }};{% endfor %}", NULL, "z=\"q\\\"uote\";y=\"é\\n\";", IX_OK, NULL, NULL},
    {NULL, "{% for k in d %}{{ k }}{% endfor %}", NULL, "bac", IX_OK, NULL, NULL},
    {NULL, "{% for c in 'héllo' %}[{{ c }}]{% endfor %}", NULL, "[h][é][l][l][o]", IX_OK, NULL, NULL},
    {NULL, "{% for a, b in [[1,2],[3,4]] %}{{ a + b }}{% endfor %}", NULL, "37", IX_OK, NULL, NULL},
    {NULL, "{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}", NULL, "-1|3-2|1-|", IX_OK, NULL, NULL},
    {NULL, "{% for x in l %}{{ loop.cycle('a', 'b') }}{% endfor %}", NULL, "aba", IX_OK, NULL, NULL},
    {NULL, "{% for i in range(2) %}{% for j in range(2) %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}{% endfor %"
     "}", NULL, "001 012 101 112 ", IX_OK, NULL, NULL},
    {NULL, "{% set x = 1 %}{% for i in l %}{% set x = x + i %}{{ x }}{% endfor %}/{{ x }}", NULL, "423/1", IX_OK, NULL, NULL},
    {NULL, "{% set ns = namespace(total=0, items=[]) %}{% for i in l %}{% set ns.total = ns.total + i %}{% set n"
     "s.items = ns.items + [i] %}{% endfor %}{{ ns.total }} {{ ns.items }}", NULL, "6 [3, 1, 2]", IX_OK, NULL, NULL},
    {NULL, "{% set ns = namespace() %}{% set ns.a = 'x' %}{{ ns.a }}{{ ns.b }}", NULL, "x", IX_OK, NULL, NULL},
    {NULL, "{% set a, b = 1, 2 %}{{ a }}{{ b }}", NULL, "12", IX_OK, NULL, NULL},
    {NULL, "{% set t %}block {{ n }}{% endset %}[{{ t }}]", NULL, "[block 7]", IX_OK, NULL, NULL},
    {NULL, "{% set t | upper %}shout{% endset %}{{ t }}", NULL, "SHOUT", IX_OK, NULL, NULL},
    {NULL, "{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ gre"
     "et('Bob', '?') }} {{ greet(punct='.', name='Cy') }}", NULL, "Hello Ann! Hello Bob? Hello Cy.", IX_OK, NULL, NULL},
    {NULL, "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1)|int }}{% endif %}{% endmacro %}{{ fa"
     "ct(5) }}", NULL, "120", IX_OK, NULL, NULL},
    {NULL, "{% macro m(a, b=a) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}", NULL, "11", IX_OK, NULL, NULL},
    {NULL, "{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}", NULL, "big", IX_OK, NULL, NULL},
    {NULL, "{% if n > 50 %}big{% elif n > 20 %}mid{% endif %}|", NULL, "|", IX_OK, NULL, NULL},
    {NULL, "{% filter upper %}hello {{ s|trim }}{% endfilter %}", NULL, "HELLO HELLO, WORLD!", IX_OK, NULL, NULL},
    {NULL, "{# comment #}a{#- c2 -#} b", NULL, "ab", IX_OK, NULL, NULL},
    {NULL, "{% raw %}{{ not a var }}{% endraw %}", NULL, "{{ not a var }}", IX_OK, NULL, NULL},
    {NULL, "x {{- ' y ' -}} z", NULL, "x y z", IX_OK, NULL, NULL},
    {NULL, "a\n"
     "  {%- if true %}\n"
     "  b\n"
     "  {%- endif %}\n"
     "c", NULL, "a  bc", IX_OK, NULL, NULL},
    {NULL, "a\n"
     "  {% if true %}\n"
     "  b\n"
     "  {% endif %}\n"
     "c", NULL, "a\n"
     "  b\n"
     "c", IX_OK, NULL, NULL},
    {NULL, "a\n"
     "  {%+ if true %}\n"
     "  b\n"
     "  {% endif +%}\n"
     "c", NULL, "a\n"
     "    b\n"
     "\n"
     "c", IX_OK, NULL, NULL},
    {NULL, "  {% if true %}x{% endif %}  \n"
     "  {{ 'y' }}  \n", NULL, "x  \n"
     "  y  ", IX_OK, NULL, NULL},
    {NULL, "{% for m in messages %}\n"
     "{{ m.role }}\n"
     "{% endfor %}\n", NULL, "system\n"
     "user\n"
     "assistant\n"
     "user\n", IX_OK, NULL, NULL},
    {NULL, "  {# c #}\n"
     "line\n"
     "    {#- c #}  x", NULL, "line  x", IX_OK, NULL, NULL},
    {NULL, "{{ raise_exception('boom') }}", NULL, NULL, IX_ERR_INVALID, "boom", NULL},
    {NULL, "{% if true %}{{ zz + 1 }}{% endif %}", NULL, NULL, IX_ERR_TYPE, "'zz' is undefined", NULL},
    {NULL, "{{ 'a' + 1 }}", NULL, NULL, IX_ERR_TYPE, "can only concatenate str (not \"int\") to str", NULL},
    {NULL, "{{ messages[0].content.upper() + '|' + messages[-1]['content'] }}", NULL, "BE BRIEF.|How are you?", IX_OK, NULL, NULL},
    {NULL, "{% set msgs = messages[1:] %}{{ msgs|length }} {{ messages|length }}", NULL, "3 4", IX_OK, NULL, NULL},
    {NULL, "{% set messages = messages[1:] %}{{ messages|length }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ d.c.z.startswith('q') }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 'x'.missing }}", NULL, "", IX_OK, NULL, NULL},
    {NULL, "{{ none.x }}", NULL, "", IX_OK, NULL, NULL},
    {NULL, "{{ strftime_now('%Y-%m-%d %H:%M') }}", NULL, "2024-07-26 00:00", IX_OK, NULL, NULL},
    {NULL, "{{ (messages|selectattr('role', 'equalto', 'system')|list|last).content|trim if (messages|selectattr"
     "('role', 'equalto', 'system')|list) else '' }}", NULL, "Be brief.", IX_OK, NULL, NULL},
    {NULL, "{% for m in messages %}{% if m.role == 'user' %}{% set ns = 1 %}{% endif %}{% endfor %}{{ ns }}", NULL, "", IX_OK, NULL, NULL},
    {NULL, "{{ messages[0] == messages[0] }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ messages[0] == messages[1] }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ {'a': 1} == {'a': 1} }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ [1, 2] == [1, 2] }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ (1, 2) == [1, 2] }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ dict(a=1, b='x') }}", NULL, "{'a': 1, 'b': 'x'}", IX_OK, NULL, NULL},
    {NULL, "{{ namespace(a=1) }}", NULL, "<Namespace {'a': 1}>", IX_OK, NULL, NULL},
    {NULL, "{{ range(3) }}", NULL, "[0, 1, 2]", IX_OK, NULL, "jinja2 renders 'range(0, 3)'"},
    {NULL, "{{ '%5s|' % 'x' }}", NULL, NULL, IX_ERR_UNSUPPORTED, "format conversion '%5' is not supported", "jinja2 renders '    x|'"},
    {NULL, "{{ l|map('string')|join('+') }}", NULL, "3+1+2", IX_OK, NULL, NULL},
    {NULL, "{{ [1, 2]|map('tojson')|list }}", NULL, "['1', '2']", IX_OK, NULL, NULL},
    {NULL, "{{ loop }}", NULL, "", IX_OK, NULL, NULL},
    {NULL, "{% for x in l %}{{ loop.depth }}{% endfor %}", NULL, "111", IX_OK, NULL, NULL},
    {NULL, "{{ 'a\\\n"
     "b' }}", NULL, "ab", IX_OK, NULL, NULL},
    {NULL, "{{ messages|selectattr('role')|list|length }}", NULL, "4", IX_OK, NULL, NULL},
    {NULL, "{{ [{'a': {'b': 1}}", NULL, NULL, IX_ERR_FORMAT, "unexpected end of template: this tag has no '}}'", NULL},
    {NULL, "{{ 10000000000 * 10000000000 }}", NULL, NULL, IX_ERR_RANGE, "integer overflow", "jinja2 renders '100000000000000000000'"},
    {NULL, "{% for i in range(3) %}{% set ns = namespace(v=i) %}{{ ns.v }}{% endfor %}", NULL, "012", IX_OK, NULL, NULL},
    /* non-ASCII case mapping, round of ints, safe as a string, % on floats, % with a list */
    {NULL, "{{ 'ÉtÉ ÿ µ straße'|lower }}", NULL, "été ÿ µ straße", IX_OK, NULL, NULL},
    {NULL, "{{ 'été ÿ µ'|upper }}", NULL, "ÉTÉ Ÿ Μ", IX_OK, NULL, NULL},
    {NULL, "{{ 'Ωμέγα ПРИВЕТ'|lower }}", NULL, "ωμέγα привет", IX_OK, NULL, NULL},
    {NULL, "{{ 'привет мир'|title }}", NULL, "Привет Мир", IX_OK, NULL, NULL},
    {NULL, "{{ 'ünï'.capitalize() }}", NULL, "Ünï", IX_OK, NULL, NULL},
    {NULL, "{{ 'ÀB' is upper }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 'àb'.islower() }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ '日本abc def'.title() }}", NULL, "日本Abc Def", IX_OK, NULL, NULL},
    {NULL, "{{ 3|round }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ 3|round(2) }}", NULL, "3", IX_OK, NULL, NULL},
    {NULL, "{{ 2.5|round }} {{ 3.5|round }}", NULL, "2.0 4.0", IX_OK, NULL, NULL},
    {NULL, "{{ (0|safe) ~ '' }}", NULL, "0", IX_OK, NULL, NULL},
    {NULL, "{{ not 0|safe }}", NULL, "False", IX_OK, NULL, NULL},
    {NULL, "{{ 1e3 is divisibleby 2 }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 2.0 is even }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ -3 is odd }}", NULL, "True", IX_OK, NULL, NULL},
    {NULL, "{{ 'x' % [1] }}", NULL, "x", IX_OK, NULL, NULL},
    {NULL, "{{ '%s' % [1, 2] }}", NULL, "[1, 2]", IX_OK, NULL, NULL},
    /* jinja2's select, reject, map, unique, items and reverse are lazy: their
     * result prints as a generator object and is always true; here a list */
    {NULL, "{{ l|select('odd') }}", NULL, "[3, 1]", IX_OK, NULL, "jinja2 prints a generator object"},
    {NULL, "{{ not e|select }}", NULL, "True", IX_OK, NULL, "jinja2: a generator is true"},
};

static void test_features(void **state) {
    (void)state;
    for (size_t k = 0; k < IX_ARRAY_LEN(k_features); k++) tpl_check(&k_features[k], FEATURE_CTX);
}

/* ---- errors ------------------------------------------------------------------------ */

typedef struct err_case {
    const char *tmpl;
    ix_status status;
    const char *msg; /* a piece of the message, position included */
} err_case;

static ix_status render_text(const char *tmpl, const ix_template_params *p, const char *ctx, ix_template_result *r,
                             ix_errbuf *err) {
    json_t *c = json_loads(ctx ? ctx : FEATURE_CTX, 0, NULL);
    assert_non_null(c);
    ix_template_vars v;
    json_t *extra = tpl_vars(c, &v);
    ix_status st = ix_template_apply(tmpl, strlen(tmpl), &v, p, r, err);
    json_decref(extra);
    json_decref(c);
    return st;
}

static void check_errors(const err_case *cases, size_t n) {
    for (size_t k = 0; k < n; k++) {
        ix_template_result r;
        ix_errbuf err = {{0}};
        ix_status st = render_text(cases[k].tmpl, NULL, NULL, &r, &err);
        if (st != cases[k].status || !strstr(err.msg, cases[k].msg))
            fail_msg("\"%s\": %s \"%s\", want %s \"%s\"", tpl_show(cases[k].tmpl, strlen(cases[k].tmpl)),
                     ix_status_name(st), err.msg, ix_status_name(cases[k].status), cases[k].msg);
        assert_null(r.text);
        ix_template_result_free(&r);
    }
}

/* Templates that do not parse: the status says why, the message where. */
static void test_syntax_errors(void **state) {
    (void)state;
    static const err_case k_cases[] = {
        {"{% if x %}yes", IX_ERR_FORMAT, "line 1, column 1: this 'if' has no '{% endif %}'"},
        {"a\n{% for m in messages %}", IX_ERR_FORMAT, "line 2, column 1: this 'for' has no '{% endfor %}'"},
        {"{{ x", IX_ERR_FORMAT, "line 1, column 1: unexpected end of template: this tag has no '}}'"},
        {"{{ 'abc }}", IX_ERR_FORMAT, "line 1, column 4: unterminated string"},
        {"{# never closed", IX_ERR_FORMAT, "unterminated comment"},
        {"{% raw %}x", IX_ERR_FORMAT, "unterminated raw block"},
        {"{% endif %}", IX_ERR_FORMAT, "line 1, column 4: unexpected 'endif'"},
        {"{% if %}{% endif %}", IX_ERR_FORMAT, "expected an expression, got '%}'"},
        {"{{ 1 + }}", IX_ERR_FORMAT, "line 1, column 8: unexpected '}}'"},
        {"{{ (1 }}", IX_ERR_FORMAT, "line 1, column 7: unexpected '}'"},
        {"{{ ) }}", IX_ERR_FORMAT, "unexpected ')'"},
        {"{{ [1, 2 }}", IX_ERR_FORMAT, "expected the match of '['"},
        {"{{ a ! b }}", IX_ERR_FORMAT, "line 1, column 6: unexpected character '!'"},
        {"{{ x.}}", IX_ERR_FORMAT, "expected an attribute name"},
        {"{% frobnicate %}", IX_ERR_FORMAT, "unknown tag 'frobnicate'"},
        {"{% for in x %}{% endfor %}", IX_ERR_FORMAT, "line 1, column 8: expected an expression, got 'in'"},
        {"{% for 1 in x %}{% endfor %}", IX_ERR_FORMAT, "can only assign to names"},
        {"{% set 1 = 2 %}", IX_ERR_FORMAT, "can only assign to names"},
        {"{% break %}", IX_ERR_FORMAT, "'break' outside a loop"},
        {"{% for x in l %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}", IX_ERR_FORMAT, "outside a loop"},
        {"{% macro m(a=1, b) %}{% endmacro %}", IX_ERR_FORMAT, "parameter without a default after one with a default"},
        {"{{ f(a=1, 2) }}", IX_ERR_FORMAT, "positional argument after a keyword argument"},
        {"{{ x is defined is none }}", IX_ERR_FORMAT, "tests cannot be chained"},
        {"{{ '\\xZZ' }}", IX_ERR_FORMAT, "truncated \\x escape"},
        {"{{ '\\U00110000' }}", IX_ERR_FORMAT, "out of range"},
        {"{{ 99999999999999999999 }}", IX_ERR_RANGE, "integer literal too large"},
        {"{{ x | frobnicate }}", IX_ERR_UNSUPPORTED, "line 1, column 8: unknown filter 'frobnicate'"},
        {"{% if x is frobnicated %}{% endif %}", IX_ERR_UNSUPPORTED, "unknown test 'frobnicated'"},
        {"{% include 'other.jinja' %}", IX_ERR_UNSUPPORTED, "'include' is not supported"},
        {"{% extends 'base' %}", IX_ERR_UNSUPPORTED, "'extends' is not supported"},
        {"{% import 'm' as m %}", IX_ERR_UNSUPPORTED, "'import' is not supported"},
        {"{% call m() %}{% endcall %}", IX_ERR_UNSUPPORTED, "'call' is not supported"},
        {"{% for x in l recursive %}{% endfor %}", IX_ERR_UNSUPPORTED, "recursive loops are not supported"},
        {"{{ f(*args) }}", IX_ERR_UNSUPPORTED, "*args and **kwargs"},
        {"{{ l[1, 2] }}", IX_ERR_UNSUPPORTED, "tuple subscripts"},
        {"{{ '\\N{BULLET}' }}", IX_ERR_UNSUPPORTED, "\\N{...}"},
        {"ok\xff", IX_ERR_UTF8, "not valid UTF-8"},
    };
    check_errors(k_cases, IX_ARRAY_LEN(k_cases));
}

/* Templates that parse but fail on these variables. */
static void test_runtime_errors(void **state) {
    (void)state;
    static const err_case k_cases[] = {
        {"{{ raise_exception('Roles must alternate') }}", IX_ERR_INVALID, "line 1, column 4: Roles must alternate"},
        {"x\n\n  {{ 'a' + 1 }}", IX_ERR_TYPE, "line 3, column 10: can only concatenate str (not \"int\") to str"},
        {"{{ 1 + 'a' }}", IX_ERR_TYPE, "unsupported operand type(s) for +: 'int' and 'str'"},
        {"{{ missing + 1 }}", IX_ERR_TYPE, "'missing' is undefined"},
        {"{{ d.nope + 1 }}", IX_ERR_TYPE, "'nope' is undefined"},
        {"{{ d['nope'] + 1 }}", IX_ERR_TYPE, "'nope' is undefined"},
        {"{{ nofunc('x') }}", IX_ERR_TYPE, "'nofunc' is undefined"},
        {"{{ d.b() }}", IX_ERR_TYPE, "'int' object is not callable"},
        {"{{ missing|tojson }}", IX_ERR_TYPE, "object of type 'Undefined' is not JSON serializable"},
        {"{{ {1: range}|tojson }}", IX_ERR_TYPE, "not JSON serializable"},
        {"{{ 1 / 0 }}", IX_ERR_TYPE, "division by zero"},
        {"{{ 1 // 0 }}", IX_ERR_TYPE, "division or modulo by zero"},
        {"{{ 'a' < 1 }}", IX_ERR_TYPE, "'<' not supported between instances of 'str' and 'int'"},
        {"{{ 1 in 2 }}", IX_ERR_TYPE, "argument of type 'int' is not iterable"},
        {"{{ 1 in 'abc' }}", IX_ERR_TYPE, "requires string as left operand"},
        {"{% for x in 5 %}{% endfor %}", IX_ERR_TYPE, "'int' object is not iterable"},
        {"{% set a, b = [1] %}", IX_ERR_TYPE, "not enough values to unpack"},
        {"{% set a = 1 %}{% set a.b = 2 %}", IX_ERR_TYPE, "cannot assign attribute 'b' on a non-namespace object"},
        {"{{ l|items }}", IX_ERR_TYPE, "can only get item pairs from a mapping"},
        {"{{ n|length }}", IX_ERR_TYPE, "object of type 'int' has no len()"},
        {"{{ 'a,b'.split('') }}", IX_ERR_TYPE, "empty separator"},
        {"{{ 'a'.startswith(1) }}", IX_ERR_TYPE, "startswith: expected a string or a tuple of strings"},
        {"{{ l[::0] }}", IX_ERR_TYPE, "slice step cannot be zero"},
        {"{{ l['a':] }}", IX_ERR_TYPE, "slice indices must be integers or None"},
        {"{{ 5 is divisibleby 0 }}", IX_ERR_TYPE, "division or modulo by zero"},
        {"{{ l|join(d=1, x=2) }}", IX_ERR_TYPE, "join got an unexpected keyword argument 'x'"},
        {"{{ 'x'|upper(1) }}", IX_ERR_TYPE, "upper takes at most 0 arguments (1 given)"},
        {"{{ l|map('frobnicate')|list }}", IX_ERR_UNSUPPORTED, "unknown filter 'frobnicate'"},
        {"{{ l|select('frobnicated')|list }}", IX_ERR_UNSUPPORTED, "unknown test 'frobnicated'"},
        {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", IX_ERR_TYPE, "macro 'm' takes 1 argument (2 given)"},
        {"{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", IX_ERR_TYPE, "macro 'm' has no parameter 'b'"},
        {"{{ '%q' % 1 }}", IX_ERR_UNSUPPORTED, "format conversion '%q' is not supported"},
        {"{{ '%s %s' % 1 }}", IX_ERR_TYPE, "not enough arguments for format string"},
        {"{{ range(1000000)|length }}", IX_ERR_RANGE, "range too big"},
        {"{{ 9223372036854775807 + 1 }}", IX_ERR_RANGE, "integer overflow"},
        {"{{ -(-9223372036854775807 - 1) }}", IX_ERR_RANGE, "integer overflow"},
        {"{{ 2 ** 64 }}", IX_ERR_RANGE, "integer overflow"},
    };
    check_errors(k_cases, IX_ARRAY_LEN(k_cases));
}

/* ---- limits: every hostile template stops, quickly, with the limit it hit --------------- */

typedef struct limit_case {
    const char *tmpl;
    ix_status status;
    const char *msg;
} limit_case;

static void test_limits(void **state) {
    (void)state;
    ix_template_params p = ix_template_default_params();
    p.max_output_bytes = 1 << 20;
    p.max_memory_bytes = 64 << 20;
    p.max_loop_iterations = 200000;
    p.max_steps = 2000000;
    static const limit_case k_cases[] = {
        /* loops: nested ranges multiply past the iteration budget */
        {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", IX_ERR_RANGE,
         "max_loop_iterations"},
        /* output: a loop printing 100 kB each time */
        {"{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", IX_ERR_TOO_LONG, "max_output_bytes"},
        /* memory: a string that doubles each iteration */
        {"{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
         IX_ERR_RANGE, "max_memory_bytes"},
        {"{{ 'x' * 10000000000 }}", IX_ERR_RANGE, "max_memory_bytes"},
        {"{{ ([1] * 100000000)|length }}", IX_ERR_RANGE, "max_memory_bytes"},
        /* recursion without end */
        {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", IX_ERR_RANGE, "nested too deeply"},
        /* recursion that branches: 2^25 calls */
        {"{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(25) }}",
         IX_ERR_RANGE, "max_steps"},
        /* scans that cost more than a step: a 1 MB substring search per iteration */
        {"{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ 'y' in s }}{% endfor %}", IX_ERR_RANGE, "max_steps"},
        {"{% set l = range(100000)|list %}{% for i in range(100000) %}{{ -1 in l }}{% endfor %}", IX_ERR_RANGE,
         "max_steps"},
        {"{{ range(100000)|unique|list|length }}", IX_ERR_RANGE, "max_steps"},
        /* a flat loop whose body is long: steps, not iterations */
        {"{% for i in range(100000) %}{{ (i + i + i + i + i + i + i + i) + (i + i + i + i + i + i + i + i) + "
         "(i + i + i + i + i + i + i + i) + (i + i + i + i + i + i + i + i) }}{% endfor %}",
         IX_ERR_RANGE, "max_steps"},
    };
    for (size_t k = 0; k < IX_ARRAY_LEN(k_cases); k++) {
        ix_template_result r;
        ix_errbuf err = {{0}};
        uint64_t t0 = ix_time_ns();
        ix_status st = render_text(k_cases[k].tmpl, &p, NULL, &r, &err);
        double ms = (double)(ix_time_ns() - t0) / 1e6;
        if (st != k_cases[k].status || !strstr(err.msg, k_cases[k].msg))
            fail_msg("\"%s\": %s \"%s\", want %s \"%s\"", k_cases[k].tmpl, ix_status_name(st), err.msg,
                     ix_status_name(k_cases[k].status), k_cases[k].msg);
        printf("  %-60.60s %8.1f ms  %s\n", k_cases[k].tmpl, ms, err.msg);
        ix_template_result_free(&r);
    }
    /* many names: symbols are hashed, lookups in a big scope are charged */
    enum { NAMES = 40000 };
    char *big = malloc(NAMES * 24 + 128);
    assert_non_null(big);
    size_t o = 0;
    for (int i = 0; i < NAMES; i++) o += (size_t)sprintf(big + o, "{%% set v%d = %d %%}", i, i);
    o += (size_t)sprintf(big + o, "{%% for i in range(100000) %%}{{ v0 }}{%% endfor %%}");
    ix_template_result r;
    ix_errbuf err = {{0}};
    uint64_t t0 = ix_time_ns();
    json_t *m = json_array();
    ix_template_vars v = {.messages = m};
    ix_status st = ix_template_apply(big, o, &v, &p, &r, &err);
    double ms = (double)(ix_time_ns() - t0) / 1e6;
    printf("  %d names set, then looked up 100000 times %8.1f ms  %s\n", NAMES, ms, err.msg);
    assert_int_equal(st, IX_ERR_RANGE);
    assert_non_null(strstr(err.msg, "max_steps"));
    ix_template_result_free(&r);
    json_decref(m);
    free(big);
}

/* Nesting is refused when the template is parsed: no deep recursion at render time. */
static void test_nesting(void **state) {
    (void)state;
    enum { N = 5000 };
    static char buf[8 * N + 64];
    const char *opens[] = {"(", "[", "-", "not ", "{% if true %}"};
    const char *closes[] = {")", "]", "", "", "{% endif %}"};
    for (size_t k = 0; k < IX_ARRAY_LEN(opens); k++) {
        size_t o = 0;
        bool stmt = opens[k][0] == '{';
        if (!stmt) o += (size_t)sprintf(buf + o, "{{ ");
        for (int i = 0; i < N / (stmt ? 4 : 1); i++) o += (size_t)sprintf(buf + o, "%s", opens[k]);
        o += (size_t)sprintf(buf + o, "1");
        for (int i = 0; i < N / (stmt ? 4 : 1); i++) o += (size_t)sprintf(buf + o, "%s", closes[k]);
        if (!stmt) o += (size_t)sprintf(buf + o, " }}");
        ix_template *t = NULL;
        ix_errbuf err = {{0}};
        ix_status st = ix_template_create(&t, buf, o, NULL, &err);
        if (st != IX_ERR_FORMAT || (!strstr(err.msg, "nested too deeply") && !strstr(err.msg, "brackets nested")))
            fail_msg("%zu-deep %s: %s %s", (size_t)N, opens[k], ix_status_name(st), err.msg);
        assert_null(t);
    }
    /* a long chain of '+' is as deep as its length */
    size_t o = (size_t)sprintf(buf, "{{ 1");
    for (int i = 0; i < 1000; i++) o += (size_t)sprintf(buf + o, " + 1");
    o += (size_t)sprintf(buf + o, " }}");
    ix_template *t = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_template_create(&t, buf, o, NULL, &err), IX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "nested too deeply"));
    /* within max_depth the same shapes work */
    ix_template_result r;
    assert_int_equal(render_text("{{ ((((((((((1 + 2)))))))))) }}{{ [[[[[[1]]]]]] }}", NULL, NULL, &r, &err), IX_OK);
    assert_string_equal(r.text, "3[[[[[[1]]]]]]");
    ix_template_result_free(&r);
    /* the template text itself */
    ix_template_params p = ix_template_default_params();
    p.max_source_bytes = 10;
    assert_int_equal(ix_template_create(&t, "{{ 'too long' }}", 16, &p, &err), IX_ERR_TOO_LONG);
    /* values nested deeper than max_depth (from the caller's JSON) */
    char json[4096];
    o = (size_t)sprintf(json, "{\"messages\": [], \"deep\": ");
    for (int i = 0; i < 300; i++) json[o++] = '[';
    for (int i = 0; i < 300; i++) json[o++] = ']';
    o += (size_t)sprintf(json + o, "}");
    assert_int_equal(render_text("{{ deep|tojson }}", NULL, json, &r, &err), IX_ERR_RANGE);
    assert_non_null(strstr(err.msg, "nested too deeply"));
}

/* ---- which bytes are the caller's data ------------------------------------------------------- */

static bool is_data(const ix_template_result *r, size_t off, size_t len) { return ix_template_is_data(r, off, len); }
/* Whether no byte of [off, off + len) is data. */
static bool is_markup(const ix_template_result *r, size_t off, size_t len) {
    for (size_t k = 0; k < r->n_data; k++)
        if (r->data[k].off < off + len && off < r->data[k].off + r->data[k].len) return false;
    return true;
}
static size_t find(const ix_template_result *r, const char *s, size_t from) {
    const char *p = strstr(r->text + from, s);
    assert_non_null(p);
    return (size_t)(p - r->text);
}

static void test_data_ranges(void **state) {
    (void)state;
    const char *ctx =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"  hi <|im_end|> there  \"}], \"bos_token\": \"<s>\","
        " \"tools\": [{\"name\": \"f<|x|>\", \"n\": 1}], \"add_generation_prompt\": true}";
    ix_template_result r;
    ix_errbuf err = {{0}};
    /* ChatML: the markers are template text, the role and content are data */
    assert_int_equal(render_text("{{ bos_token }}{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + "
                                 "'<|im_end|>' }}{% endfor %}",
                                 NULL, ctx, &r, &err),
                     IX_OK);
    assert_string_equal(r.text, "<s><|im_start|>user\n  hi <|im_end|> there  <|im_end|>");
    assert_true(is_markup(&r, 0, 3 + 12));              /* <s><|im_start|> */
    assert_true(is_data(&r, 15, 4));                    /* user */
    assert_true(is_markup(&r, 19, 1));                  /* \n */
    assert_true(is_data(&r, 20, 23));                   /* the content, its <|im_end|> included */
    assert_true(is_markup(&r, 43, 10));                 /* the closing <|im_end|> */
    assert_int_equal(r.n_data, 2);
    ix_template_result_free(&r);
    /* trim, slices and split keep exact ranges; other transformations make data */
    assert_int_equal(render_text("[{{ messages[0].content|trim }}][{{ messages[0].content[2:4] ~ '|' }}]"
                                 "[{{ messages[0].content.split('<|im_end|>')|join('#') }}][{{ messages[0].role|upper }}]",
                                 NULL, ctx, &r, &err),
                     IX_OK);
    assert_string_equal(r.text, "[hi <|im_end|> there][hi|][  hi # there  ][USER]");
    assert_true(is_data(&r, 1, 19));
    assert_true(is_markup(&r, 0, 1) && is_markup(&r, 20, 2));
    assert_true(is_data(&r, 22, 2) && is_markup(&r, 24, 3));
    size_t hash = find(&r, "#", 0);
    assert_true(is_markup(&r, hash, 1) && is_data(&r, hash - 5, 5) && is_data(&r, hash + 1, 8));
    assert_true(is_data(&r, find(&r, "USER", 0), 4));
    ix_template_result_free(&r);
    /* tojson: the strings' text is data, the JSON around it is not */
    assert_int_equal(render_text("{{ tools|tojson }}", NULL, ctx, &r, &err), IX_OK);
    assert_string_equal(r.text, "[{\"name\": \"f<|x|>\", \"n\": 1}]");
    assert_true(is_data(&r, find(&r, "name", 0), 4));
    assert_true(is_data(&r, find(&r, "f<|x|>", 0), 6));
    assert_true(is_markup(&r, 0, 2) && is_markup(&r, find(&r, ": 1", 0), 4));
    ix_template_result_free(&r);
    /* a macro's output keeps the ranges of what it printed */
    assert_int_equal(render_text("{% macro turn(m) %}<{{ m.role }}>{{ m.content|trim }}</>{% endmacro %}"
                                 "{{ turn(messages[0]) }}",
                                 NULL, ctx, &r, &err),
                     IX_OK);
    assert_string_equal(r.text, "<user>hi <|im_end|> there</>");
    assert_true(is_markup(&r, 0, 1) && is_data(&r, 1, 4) && is_markup(&r, 5, 1) && is_data(&r, 6, 19));
    assert_true(is_markup(&r, 25, 3));
    ix_template_result_free(&r);
    /* ix_template_is_data at the edges of the ranges */
    ix_template_span spans[] = {{2, 3}, {10, 1}};
    ix_template_result fake = {.text = NULL, .len = 20, .data = spans, .n_data = 2};
    assert_true(ix_template_is_data(&fake, 2, 3) && ix_template_is_data(&fake, 4, 1) && ix_template_is_data(&fake, 10, 1));
    assert_false(ix_template_is_data(&fake, 1, 2) || ix_template_is_data(&fake, 4, 2) || ix_template_is_data(&fake, 0, 1));
    assert_false(ix_template_is_data(&fake, 9, 2) || ix_template_is_data(&fake, 19, 1) || ix_template_is_data(NULL, 0, 1));
}

/* ---- the API's edges ------------------------------------------------------------------------------ */

static void test_api(void **state) {
    (void)state;
    size_t live = ix_mem_live_count();
    ix_template *t = NULL;
    ix_errbuf err = {{0}};
    ix_template_result r;
    assert_int_equal(ix_template_create(NULL, "x", 1, NULL, &err), IX_ERR_INVALID);
    assert_int_equal(ix_template_create(&t, NULL, 1, NULL, &err), IX_ERR_INVALID);
    ix_template_destroy(NULL);
    ix_template_result_free(NULL);
    /* an empty template renders "", with text to read */
    assert_int_equal(ix_template_create(&t, "", 0, NULL, &err), IX_OK);
    json_t *m = json_array(), *notarr = json_object();
    ix_template_vars v = {.messages = m};
    assert_int_equal(ix_template_render(t, &v, &r, &err), IX_OK);
    assert_non_null(r.text);
    assert_int_equal(r.len, 0);
    ix_template_result_free(&r);
    assert_int_equal(ix_template_render(t, NULL, &r, &err), IX_ERR_INVALID);
    v.messages = notarr;
    assert_int_equal(ix_template_render(t, &v, &r, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "messages must be a JSON array"));
    v.messages = m;
    v.tools = notarr;
    assert_int_equal(ix_template_render(t, &v, &r, &err), IX_ERR_INVALID);
    ix_template_destroy(t);
    /* extra must be an object; the named fields win over its members */
    v.tools = NULL;
    json_t *extra = json_pack("{s:s, s:s}", "bos_token", "EXTRA", "who", "x");
    v.extra = extra;
    v.bos_token = "<s>";
    assert_int_equal(ix_template_create(&t, "{{ bos_token }}{{ who }}{{ eos_token is defined }}", 50, NULL, &err), IX_OK);
    assert_int_equal(ix_template_render(t, &v, &r, &err), IX_OK);
    assert_string_equal(r.text, "<s>xFalse");
    ix_template_result_free(&r);
    v.extra = m;
    assert_int_equal(ix_template_render(t, &v, &r, &err), IX_ERR_INVALID);
    assert_true(ix_template_mentions(t, "who") && ix_template_mentions(t, "bos_token"));
    assert_false(ix_template_mentions(t, "tools") || ix_template_mentions(t, "wh") || ix_template_mentions(NULL, "x"));
    ix_template_destroy(t);
    json_decref(extra);
    /* "\r\n" reads as "\n"; one trailing newline goes, as in Jinja */
    v.extra = NULL;
    assert_int_equal(ix_template_apply("a\r\nb\rc\n\n", 8, &v, NULL, &r, &err), IX_OK);
    assert_string_equal(r.text, "a\nb\nc\n");
    ix_template_result_free(&r);
    /* a string in the input that is not UTF-8 */
    json_t *bad = json_pack("[{s:s}]", "content", "x");
    json_object_set_new(json_array_get(bad, 0), "content", json_stringn_nocheck("\xc3(", 2));
    v.messages = bad;
    assert_int_equal(ix_template_apply("{{ messages[0].content }}", 25, &v, NULL, &r, &err), IX_ERR_UTF8);
    json_decref(bad);
    /* strftime_now only with a time given */
    v.messages = m;
    assert_int_equal(ix_template_apply("{{ strftime_now is defined }}", 29, &v, NULL, &r, &err), IX_OK);
    assert_string_equal(r.text, "False");
    ix_template_result_free(&r);
    v.now_unix_s = 86400 * 365;
    assert_int_equal(ix_template_apply("{{ strftime_now('%d %b %Y') }}", 30, &v, NULL, &r, &err), IX_OK);
    assert_string_equal(r.text, "01 Jan 1971");
    ix_template_result_free(&r);
    json_decref(m);
    json_decref(notarr);
    assert_int_equal(ix_mem_live_count(), live);
}

/* ---- allocation failures --------------------------------------------------------------------------- */

/* Each allocation of a create and a render fails in turn: either IX_OK or
 * IX_ERR_NOMEM comes back, with nothing leaked. */
static void test_oom(void **state) {
    (void)state;
    const char *tmpl =
        "{%- set ns = namespace(n=0) %}{% macro row(m) %}{{ m.role|upper }}: {{ m.content|trim }}{% endmacro %}"
        "{%- for m in messages if m.role != 'tool' %}{% set ns.n = ns.n + 1 %}{{ row(m) }}\n{% endfor %}"
        "{{ tools|tojson(indent=2) }}{{ (messages|map(attribute='role')|list)[::-1]|join(',') }}{{ ns.n }}";
    const char *ctx =
        "{\"messages\": [{\"role\": \"system\", \"content\": \" s \"}, {\"role\": \"user\", \"content\": \"u\"}],"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}}]}";
    json_t *c = json_loads(ctx, 0, NULL);
    ix_template_vars v;
    json_t *extra = tpl_vars(c, &v);
    size_t live0 = ix_mem_live_count();
    long n;
    for (n = 0;; n++) {
        ix_template_result r;
        ix_errbuf err = {{0}};
        ix_mem_fail_after(n);
        ix_status st = ix_template_apply(tmpl, strlen(tmpl), &v, NULL, &r, &err);
        long failed = ix_mem_failed_count();
        ix_mem_fail_reset();
        if (failed == 0) {
            assert_int_equal(st, IX_OK);
            assert_non_null(strstr(r.text, "SYSTEM: s\nUSER: u\n"));
            ix_template_result_free(&r);
            break;
        }
        if (st != IX_ERR_NOMEM) fail_msg("failing allocation %ld: %s %s", n, ix_status_name(st), err.msg);
        assert_null(r.text);
        ix_template_result_free(&r);
        assert_int_equal(ix_mem_live_count(), live0);
    }
    assert_true(n > 10);
    json_decref(extra);
    json_decref(c);
}

/* ---- one template, several threads ---------------------------------------------------------------- */

typedef struct thread_job {
    const ix_template *t;
    const ix_template_vars *v;
    const char *want;
    int bad;
} thread_job;

static void *render_many(void *arg) {
    thread_job *j = arg;
    for (int i = 0; i < 200; i++) {
        ix_template_result r;
        ix_errbuf err;
        if (ix_template_render(j->t, j->v, &r, &err) != IX_OK || strcmp(r.text, j->want)) j->bad++;
        ix_template_result_free(&r);
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    const char *tmpl = "{% for m in messages %}<|{{ m.role }}|>{{ m.content|trim }}{% if not loop.last %}{{ '\\n' }}{% endif %}"
                       "{% endfor %}";
    ix_template *t = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_template_create(&t, tmpl, strlen(tmpl), NULL, &err), IX_OK);
    json_t *c = json_loads(FEATURE_CTX, 0, NULL);
    ix_template_vars v;
    json_t *extra = tpl_vars(c, &v);
    const char *want = "<|system|>Be brief.\n<|user|>Hi\n<|assistant|>Hello!\n<|user|>How are you?";
    pthread_t th[4];
    thread_job jobs[4];
    for (int k = 0; k < 4; k++) {
        jobs[k] = (thread_job){t, &v, want, 0};
        assert_int_equal(pthread_create(&th[k], NULL, render_many, &jobs[k]), 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(jobs[k].bad, 0);
    }
    ix_template_destroy(t);
    json_decref(extra);
    json_decref(c);
}

int main(void) {
    if (tpl_dump("features", k_features, IX_ARRAY_LEN(k_features), FEATURE_CTX)) return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_features),    cmocka_unit_test(test_syntax_errors), cmocka_unit_test(test_runtime_errors),
        cmocka_unit_test(test_limits),      cmocka_unit_test(test_nesting),       cmocka_unit_test(test_data_ranges),
        cmocka_unit_test(test_api),         cmocka_unit_test(test_oom),           cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
