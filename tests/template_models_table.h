/* The conformance table of real model templates (shared by
 * test_template_models, which renders it with the template module, and
 * test_chat, which sends its conversations through the server's chat path):
 * each template is the model's published chat_template character for
 * character, each expected string what Hugging Face's jinja2 renders
 * (tests/template_ref.py --check). Include after template_test_util.h. */
#ifndef INFERX_TEMPLATE_MODELS_TABLE_H
#define INFERX_TEMPLATE_MODELS_TABLE_H
/* The conversations (OpenAI message lists) the table renders. */
#define CONVO "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \" Hi\\n\"}, " \
    "{\"role\": \"assistant\", \"content\": \"Hello!\"}, {\"role\": \"user\", \"content\": \"How are you?" \
    "\"}]"
#define NOSYS "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello! How can " \
    "I help?\"}, {\"role\": \"user\", \"content\": \"Tell me a joke.\"}]"
#define ONE_TURN "[{\"role\": \"user\", \"content\": \"Hi\"}]"
#define TOOLS "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the curre" \
    "nt weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\":" \
    " \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\"" \
    ", \"fahrenheit\"]}}, \"required\": [\"city\"]}}}]"
#define TOOL_ASK "[{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"}, {\"role\": \"user\", \"conte" \
    "nt\": \"What's the weather in Paris?\"}]"
#define TOOL_CONVO "[{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"}, {\"role\": \"user\", \"conte" \
    "nt\": \"What's the weather in Paris?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\"" \
    ": [{\"id\": \"call12345\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"argum" \
    "ents\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c" \
    "all12345\", \"name\": \"get_weather\", \"content\": \"{\\\"temperature\\\": 22}\"}]"
#define TOOL_CONVO_NOSYS "[{\"role\": \"user\", \"content\": \"What's the weather in Paris?\"}, {\"role\": \"assistant\", \"co" \
    "ntent\": null, \"tool_calls\": [{\"id\": \"call12345\", \"type\": \"function\", \"function\": {\"nam" \
    "e\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}}]}, {\"role\": \"" \
    "tool\", \"tool_call_id\": \"call12345\", \"name\": \"get_weather\", \"content\": \"{\\\"temperature\\" \
    "\": 22}\"}]"
#define TOOL_CONVO_STRARGS "[{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"}, {\"role\": \"user\", \"conte" \
    "nt\": \"What's the weather in Paris?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\"" \
    ": [{\"id\": \"call12345\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"argum" \
    "ents\": \"{\\\"city\\\": \\\"Paris\\\", \\\"unit\\\": \\\"celsius\\\"}\"}}]}, {\"role\": \"tool\", \"" \
    "tool_call_id\": \"call12345\", \"name\": \"get_weather\", \"content\": \"{\\\"temperature\\\": 22}\"" \
    "}]"
#define PARTS "[{\"role\": \"system\", \"content\": [{\"type\": \"text\", \"text\": \"Be brief.\"}]}, {\"role\": \"" \
    "user\", \"content\": [{\"type\": \"text\", \"text\": \"Describe \"}, {\"type\": \"image\"}, {\"type\"" \
    ": \"text\", \"text\": \"this image.\"}]}]"
#define BAD_ORDER "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]"
#define THINK "[{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nadd" \
    "\\n</think>\\n\\n4\"}, {\"role\": \"user\", \"content\": \"3+3?\"}]"
#define THINK_SYS "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"2+2?\"}, {\"" \
    "role\": \"assistant\", \"content\": \"<think>\\nadd\\n</think>\\n\\n4\"}, {\"role\": \"user\", \"con" \
    "tent\": \"3+3?\"}]"

static const char k_llama2[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message "
    "= messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false"
    " %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % "
    "2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') "
    "}}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + sy"
    "stem_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['conten"
    "t'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/"
    "INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% e"
    "ndif %}{% endfor %}";

static const char k_llama3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header"
    "_id|>' + message['role'] + '<|end_header_id|>\n"
    "\n"
    "'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + "
    "content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>a"
    "ssistant<|end_header_id|>\n"
    "\n"
    "' }}{% endif %}";

static const char k_llama3_1[] =
    "{{- bos_token }}\n"
    "{%- if custom_tools is defined %}\n"
    "    {%- set tools = custom_tools %}\n"
    "{%- endif %}\n"
    "{%- if not tools_in_user_message is defined %}\n"
    "    {%- set tools_in_user_message = true %}\n"
    "{%- endif %}\n"
    "{%- if not date_string is defined %}\n"
    "    {%- set date_string = \"26 Jul 2024\" %}\n"
    "{%- endif %}\n"
    "{%- if not tools is defined %}\n"
    "    {%- set tools = none %}\n"
    "{%- endif %}\n"
    "\n"
    "{#- This block extracts the system message, so we can slot it into the right place. #}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set system_message = \"\" %}\n"
    "{%- endif %}\n"
    "\n"
    "{#- System message + builtin tools #}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{%- if builtin_tools is defined or tools is not none %}\n"
    "    {{- \"Environment: ipython\\n\" }}\n"
    "{%- endif %}\n"
    "{%- if builtin_tools is defined %}\n"
    "    {{- \"Tools: \" + builtin_tools | reject('equalto', 'code_interpreter') | join(\", \") + \"\\n\\"
    "n\"}}\n"
    "{%- endif %}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{%- if tools is not none and not tools_in_user_message %}\n"
    "    {{- \"You have access to the following functions. To call a function, please respond with JSON f"
    "or a function call.\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name"
    " and its value}.' }}\n"
    "    {{- \"Do not use variables.\\n\\n\" }}\n"
    "    {%- for t in tools %}\n"
    "        {{- t | tojson(indent=4) }}\n"
    "        {{- \"\\n\\n\" }}\n"
    "    {%- endfor %}\n"
    "{%- endif %}\n"
    "{{- system_message }}\n"
    "{{- \"<|eot_id|>\" }}\n"
    "\n"
    "{#- Custom tools are passed in a user message with some extra guidance #}\n"
    "{%- if tools_in_user_message and not tools is none %}\n"
    "    {#- Extract the first user message so we can plug it in here #}\n"
    "    {%- if messages | length != 0 %}\n"
    "        {%- set first_user_message = messages[0]['content']|trim %}\n"
    "        {%- set messages = messages[1:] %}\n"
    "    {%- else %}\n"
    "        {{- raise_exception(\"Cannot put tools in the first user message when there's no first user "
    "message!\") }}\n"
    "{%- endif %}\n"
    "    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
    "    {{- \"Given the following functions, please respond with a JSON for a function call \" }}\n"
    "    {{- \"with its proper arguments that best answers the given prompt.\\n\\n\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name"
    " and its value}.' }}\n"
    "    {{- \"Do not use variables.\\n\\n\" }}\n"
    "    {%- for t in tools %}\n"
    "        {{- t | tojson(indent=4) }}\n"
    "        {{- \"\\n\\n\" }}\n"
    "    {%- endfor %}\n"
    "    {{- first_user_message + \"<|eot_id|>\"}}\n"
    "{%- endif %}\n"
    "\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
    "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] "
    "| trim + '<|eot_id|>' }}\n"
    "    {%- elif 'tool_calls' in message %}\n"
    "        {%- if not message.tool_calls|length == 1 %}\n"
    "            {{- raise_exception(\"This model only supports single tool-calls at once!\") }}\n"
    "        {%- endif %}\n"
    "        {%- set tool_call = message.tool_calls[0].function %}\n"
    "        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}\n"
    "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "            {{- \"<|python_tag|>\" + tool_call.name + \".call(\" }}\n"
    "            {%- for arg_name, arg_val in tool_call.arguments | items %}\n"
    "                {{- arg_name + '=\"' + arg_val + '\"' }}\n"
    "                {%- if not loop.last %}\n"
    "                    {{- \", \" }}\n"
    "                {%- endif %}\n"
    "                {%- endfor %}\n"
    "            {{- \")\" }}\n"
    "        {%- else  %}\n"
    "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "            {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n"
    "            {{- '\"parameters\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- \"}\" }}\n"
    "        {%- endif %}\n"
    "        {%- if builtin_tools is defined %}\n"
    "            {#- This means we're in ipython mode #}\n"
    "            {{- \"<|eom_id|>\" }}\n"
    "        {%- else %}\n"
    "            {{- \"<|eot_id|>\" }}\n"
    "        {%- endif %}\n"
    "    {%- elif message.role == \"tool\" or message.role == \"ipython\" %}\n"
    "        {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}\n"
    "        {%- if message.content is mapping or message.content is iterable %}\n"
    "            {{- message.content | tojson }}\n"
    "        {%- else %}\n"
    "            {{- message.content }}\n"
    "        {%- endif %}\n"
    "        {{- \"<|eot_id|>\" }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n";

static const char k_mistral_v1[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 =="
    " 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%"
    " endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif "
    "message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('On"
    "ly user and assistant roles are supported!') }}{% endif %}{% endfor %}";

static const char k_mistral_v3[] =
    "{%- if messages[0][\"role\"] == \"system\" %}\n"
    "    {%- set system_message = messages[0][\"content\"] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "{%- if not tools is defined %}\n"
    "    {%- set tools = none %}\n"
    "{%- endif %}\n"
    "{%- set user_messages = loop_messages | selectattr(\"role\", \"equalto\", \"user\") | list %}\n"
    "\n"
    "{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}\n"
    "{%- set ns = namespace() %}\n"
    "{%- set ns.index = 0 %}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if not (message.role == \"tool\" or message.role == \"tool_results\" or (message.tool_calls "
    "is defined and message.tool_calls is not none)) %}\n"
    "        {%- if (message[\"role\"] == \"user\") != (ns.index % 2 == 0) %}\n"
    "            {{- raise_exception(\"After the optional system message, conversation roles must alterna"
    "te user/assistant/user/assistant/...\") }}\n"
    "        {%- endif %}\n"
    "        {%- set ns.index = ns.index + 1 %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "\n"
    "{{- bos_token }}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if message[\"role\"] == \"user\" %}\n"
    "        {%- if tools is not none and (message == user_messages[-1]) %}\n"
    "            {{- \"[AVAILABLE_TOOLS] [\" }}\n"
    "            {%- for tool in tools %}\n"
    "                {%- set tool = tool.function %}\n"
    "                {{- '{\"type\": \"function\", \"function\": {' }}\n"
    "                {%- for key, val in tool.items() if key != \"return\" %}\n"
    "                    {%- if val is string %}\n"
    "                        {{- '\"' + key + '\": \"' + val + '\"' }}\n"
    "                    {%- else %}\n"
    "                        {{- '\"' + key + '\": ' + val|tojson }}\n"
    "                    {%- endif %}\n"
    "                    {%- if not loop.last %}\n"
    "                        {{- \", \" }}\n"
    "                    {%- endif %}\n"
    "                {%- endfor %}\n"
    "                {{- \"}}\" }}\n"
    "                {%- if not loop.last %}\n"
    "                    {{- \", \" }}\n"
    "                {%- else %}\n"
    "                    {{- \"]\" }}\n"
    "                {%- endif %}\n"
    "            {%- endfor %}\n"
    "            {{- \"[/AVAILABLE_TOOLS]\" }}\n"
    "            {%- endif %}\n"
    "        {%- if loop.last and system_message is defined %}\n"
    "            {{- \"[INST] \" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n"
    "        {%- else %}\n"
    "            {{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}\n"
    "        {%- endif %}\n"
    "    {%- elif message.tool_calls is defined and message.tool_calls is not none %}\n"
    "        {{- \"[TOOL_CALLS] [\" }}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- set out = tool_call.function|tojson %}\n"
    "            {{- out[:-1] }}\n"
    "            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}\n"
    "                {{- raise_exception(\"Tool call IDs should be alphanumeric strings with length 9!\")"
    " }}\n"
    "            {%- endif %}\n"
    "            {{- ', \"id\": \"' + tool_call.id + '\"}' }}\n"
    "            {%- if not loop.last %}\n"
    "                {{- \", \" }}\n"
    "            {%- else %}\n"
    "                {{- \"]\" + eos_token }}\n"
    "            {%- endif %}\n"
    "        {%- endfor %}\n"
    "    {%- elif message[\"role\"] == \"assistant\" %}\n"
    "        {{- \" \" + message[\"content\"]|trim + eos_token}}\n"
    "    {%- elif message[\"role\"] == \"tool_results\" or message[\"role\"] == \"tool\" %}\n"
    "        {%- if message.content is defined and message.content.content is defined %}\n"
    "            {%- set content = message.content.content %}\n"
    "        {%- else %}\n"
    "            {%- set content = message.content %}\n"
    "        {%- endif %}\n"
    "        {{- '[TOOL_RESULTS] {\"content\": ' + content|string + \", \" }}\n"
    "        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}\n"
    "            {{- raise_exception(\"Tool call IDs should be alphanumeric strings with length 9!\") }}\n"
    "        {%- endif %}\n"
    "        {{- '\"call_id\": \"' + message.tool_call_id + '\"}[/TOOL_RESULTS]' }}\n"
    "    {%- else %}\n"
    "        {{- raise_exception(\"Only user and assistant roles are supported, with the exception of an "
    "initial optional system message!\") }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n";

static const char k_mistral_v7[] =
    "{%- set today = strftime_now(\"%Y-%m-%d\") %}\n"
    "{%- set default_system_message = \"You are Mistral Small 3, a Large Language Model (LLM) created by "
    "Mistral AI, a French startup headquartered in Paris.\\\n"
    "Your knowledge base was last updated on 2023-10-01. The current date is \" + today + \".\\\n"
    "\\\n"
    "When you're not sure about some information, you say that you don't have the information and don't m"
    "ake up anything.\\\n"
    "If the user's question is not clear, ambiguous, or does not provide enough context for you to accura"
    "tely answer the question, you do not try to answer it right away and you rather ask the user to clar"
    "ify their request (e.g. \\\"What are some good restaurants around me?\\\" => \\\"Where are you?\\\" "
    "or \\\"When is the next flight to Tokyo\\\" => \\\"Where do you travel from?\\\")\" %}\n"
    "\n"
    "{{- bos_token }}\n"
    "\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- if messages[0]['content'] is string %}\n"
    "        {%- set system_message = messages[0]['content'] %}\n"
    "        {%- set loop_messages = messages[1:] %}\n"
    "    {%- else %}\n"
    "        {%- set system_message = messages[0]['content'][0]['text'] %}\n"
    "        {%- set loop_messages = messages[1:] %}\n"
    "    {%- endif %}\n"
    "{%- else %}\n"
    "    {%- set system_message = default_system_message %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "{%- if not tools is defined %}\n"
    "    {%- set tools = none %}\n"
    "{%- elif tools is not none %}\n"
    "    {%- set parallel_tool_prompt = \"You are a helpful assistant that can call tools. If you call on"
    "e or more tools, format them in a single JSON array or objects, where each object is a tool call, no"
    "t as separate objects outside of an array or multiple arrays. Use the format [{\\\"name\\\": tool ca"
    "ll name, \\\"arguments\\\": tool call arguments}, additional tool calls] if you call more than one t"
    "ool. If you call tools, do not attempt to interpret them or otherwise provide a response until you r"
    "eceive a tool call result that you can interpret for the user.\" %}\n"
    "    {%- if system_message is defined %}\n"
    "        {%- set system_message = parallel_tool_prompt + \"\\\n"
    "\\\n"
    "\" + system_message %}\n"
    "    {%- else %}\n"
    "        {%- set system_message = parallel_tool_prompt %}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}\n"
    "\n"
    "{%- set user_messages = loop_messages | selectattr(\"role\", \"equalto\", \"user\") | list %}\n"
    "\n"
    "{%- set filtered_messages = [] %}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if message[\"role\"] not in [\"tool\", \"tool_results\"] and not message.get(\"tool_calls\")"
    " %}\n"
    "        {%- set filtered_messages = filtered_messages + [message] %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "\n"
    "{%- for message in filtered_messages %}\n"
    "    {%- if (message[\"role\"] == \"user\") != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception(\"After the optional system message, conversation roles must alternate u"
    "ser/assistant/user/assistant/...\") }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if message[\"role\"] == \"user\" %}\n"
    "        {%- if tools is not none and (message == user_messages[-1]) %}\n"
    "            {{- \"[AVAILABLE_TOOLS] [\" }}\n"
    "            {%- for tool in tools %}\n"
    "                {%- set tool = tool.function %}\n"
    "                {{- '{\"type\": \"function\", \"function\": {' }}\n"
    "                {%- for key, val in tool.items() if key != \"return\" %}\n"
    "                    {%- if val is string %}\n"
    "                        {{- '\"' + key + '\": \"' + val + '\"' }}\n"
    "                    {%- else %}\n"
    "                        {{- '\"' + key + '\": ' + val|tojson }}\n"
    "                    {%- endif %}\n"
    "                    {%- if not loop.last %}\n"
    "                        {{- \", \" }}\n"
    "                    {%- endif %}\n"
    "                {%- endfor %}\n"
    "                {{- \"}}\" }}\n"
    "                {%- if not loop.last %}\n"
    "                    {{- \", \" }}\n"
    "                {%- else %}\n"
    "                    {{- \"]\" }}\n"
    "                {%- endif %}\n"
    "            {%- endfor %}\n"
    "            {{- \"[/AVAILABLE_TOOLS]\" }}\n"
    "        {%- endif %}\n"
    "        {%- if message['content'] is string %}\n"
    "        {{- '[INST]' + message['content'] + '[/INST]' }}\n"
    "        {%- else %}\n"
    "                {{- '[INST]' }}\n"
    "                {%- for block in message['content'] %}\n"
    "                        {%- if block['type'] == 'text' %}\n"
    "                                {{- block['text'] }}\n"
    "                        {%- elif block['type'] == 'image' or block['type'] == 'image_url' %}\n"
    "                                {{- '[IMG]' }}\n"
    "                            {%- else %}\n"
    "                                {{- raise_exception('Only text and image blocks are supported in mes"
    "sage content!') }}\n"
    "                            {%- endif %}\n"
    "                    {%- endfor %}\n"
    "                {{- '[/INST]' }}\n"
    "            {%- endif %}\n"
    "    {%- elif message[\"role\"] == \"tool_calls\" or message.tool_calls is defined %}\n"
    "        {%- if message.tool_calls is defined %}\n"
    "            {%- set tool_calls = message.tool_calls %}\n"
    "        {%- else %}\n"
    "            {%- set tool_calls = message.content %}\n"
    "        {%- endif %}\n"
    "        {{- \"[TOOL_CALLS] [\" }}\n"
    "        {%- for tool_call in tool_calls %}\n"
    "            {%- set out = tool_call.function|tojson %}\n"
    "            {{- out[:-1] }}\n"
    "            {%- if not tool_call.id is defined or tool_call.id|length < 9 %}\n"
    "                {{- raise_exception(\"Tool call IDs should be alphanumeric strings with length >= 9!"
    " (1)\" + tool_call.id) }}\n"
    "            {%- endif %}\n"
    "            {{- ', \"id\": \"' + tool_call.id[-9:] + '\"}' }}\n"
    "            {%- if not loop.last %}\n"
    "                {{- \", \" }}\n"
    "            {%- else %}\n"
    "                {{- \"]\" + eos_token }}\n"
    "            {%- endif %}\n"
    "        {%- endfor %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n"
    "        {%- if message['content'] is string %}\n"
    "            {{- message['content'] + eos_token }}\n"
    "        {%- else %}\n"
    "            {{- message['content'][0]['text'] + eos_token }}\n"
    "        {%- endif %}\n"
    "    {%- elif message[\"role\"] == \"tool_results\" or message[\"role\"] == \"tool\" %}\n"
    "        {%- if message.content is defined and message.content.content is defined %}\n"
    "            {%- set content = message.content.content %}\n"
    "        {%- else %}\n"
    "            {%- set content = message.content %}\n"
    "        {%- endif %}\n"
    "        {{- '[TOOL_RESULTS] {\"content\": ' + content|string + \", \" }}\n"
    "        {%- if not message.tool_call_id is defined or message.tool_call_id|length < 9 %}\n"
    "            {{- raise_exception(\"Tool call IDs should be alphanumeric strings with length >= 9! (2)"
    "\" + message.tool_call_id) }}\n"
    "        {%- endif %}\n"
    "        {{- '\"call_id\": \"' + message.tool_call_id[-9:] + '\"}[/TOOL_RESULTS]' }}\n"
    "    {%- else %}\n"
    "        {{- raise_exception(\"Only user and assistant roles are supported, with the exception of an "
    "initial optional system message!\") }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n";

static const char k_chatml[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im"
    "_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif "
    "%}";

static const char k_qwen2_5[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and argum"
    "ents within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"ar"
    "guments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistan"
    "t.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message"
    ".role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

static const char k_qwen3[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- messages[0].content + '\\n\\n' }}\n"
    "    {%- endif %}\n"
    "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou ar"
    "e provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and argum"
    "ents within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"ar"
    "guments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n"
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" and message.content is string and not(mes"
    "sage.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.multi_step_tool = false %}\n"
    "        {%- set ns.last_query_index = index %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.content is string %}\n"
    "        {%- set content = message.content %}\n"
    "    {%- else %}\n"
    "        {%- set content = '' %}\n"
    "    {%- endif %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {%- set reasoning_content = '' %}\n"
    "        {%- if message.reasoning_content is string %}\n"
    "            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n"
    "            {%- if '</think>' in content %}\n"
    "                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think"
    ">')[-1].lstrip('\\n') %}\n"
    "                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"
    "            {%- endif %}\n"
    "        {%- endif %}\n"
    "        {%- if loop.index0 > ns.last_query_index %}\n"
    "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n')"
    " + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "            {%- else %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "            {%- endif %}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "        {%- endif %}\n"
    "        {%- if message.tool_calls %}\n"
    "            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and content) or (not loop.first) %}\n"
    "                    {{- '\\n' }}\n"
    "                {%- endif %}\n"
    "                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n"
    "                {%- endif %}\n"
    "                {{- '<tool_call>\\n{\"name\": \"' }}\n"
    "                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}\n"
    "                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n"
    "                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n"
    "                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}";

static const char k_phi3[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n"
    "' + message['content'] + '<|end|>' + '\n"
    "' + '<|assistant|>' + '\n"
    "'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n"
    "'}}{% endif %}{% endfor %}";

static const char k_phi3_small[] =
    "{{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n"
    "' + message['content'] + '<|end|>\n"
    "' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n"
    "' }}{% else %}{{ eos_token }}{% endif %}";

static const char k_gemma[] =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported"
    "') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 ="
    "= 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{"
    "% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = m"
    "essage['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n"
    "' + message['content'] | trim + '<end_of_turn>\n"
    "' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n"
    "'}}{% endif %}";

static const char k_gemma3[] =
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n"
    "\n"
    "' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n"
    "\n"
    "' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") "
    "}}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n"
    "' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n"
    "' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n"
    "'}}\n"
    "{%- endif -%}\n";

static const char k_zephyr[] =
    "{% for message in messages %}\n"
    "{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\n"
    "' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n"
    "{{ '<|system|>\n"
    "' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n"
    "{{ '<|assistant|>\n"
    "'  + message['content'] + eos_token }}\n"
    "{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n"
    "{{ '<|assistant|>' }}\n"
    "{% endif %}\n"
    "{% endfor %}";

static const char k_deepseek[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{{ bo"
    "s_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + message['cont"
    "ent'] + '\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + "
    "eos_token }}{% elif message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}{% endif %}{% e"
    "ndfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

static const char k_deepseek_r1[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% se"
    "t ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp="
    "true) %}{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}{"
    "% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}{%-"
    " else %}{% set ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}{%- endif %}{%-"
    " endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}{%- if mess"
    "age['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %"
    "}{%- if message['role'] == 'assistant' and 'tool_calls' in message %}{%- set ns.is_tool = false -%}{"
    "%- for tool in message['tool_calls'] %}{%- if not ns.is_first %}{%- if message['content'] is none %}"
    "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['fun"
    "ction']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜too"
    "l▁call▁end｜>'}}{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜tool▁calls▁begin｜><｜tool▁call▁"
    "begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + to"
    "ol['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}{%- endif %}{%- set ns.is_first ="
    " true -%}{%- else %}{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function"
    "']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁cal"
    "l▁end｜>'}}{%- endif %}{%- endfor %}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- if mes"
    "sage['role'] == 'assistant' and 'tool_calls' not in message %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁"
    "end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{% set"
    " content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</thin"
    "k>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{"
    "%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}{{'<｜tool"
    "▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_o"
    "utput_first = false %}{%- else %}{{'<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end"
    "｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{"
    "% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}";

static const char k_gpt2[] =
    "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}";

/* Text the tool cases share (what the templates write around the tool list). */
#define LLAMA31_TOOL_PROMPT \
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n" \
    "\n" \
    "Environment: ipython\n" \
    "Cutting Knowledge Date: December 2023\n" \
    "Today Date: 26 Jul 2024\n" \
    "\n" \
    "You are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n" \
    "\n" \
    "Given the following functions, please respond with a JSON for a function call with its proper argume" \
    "nts that best answers the given prompt.\n" \
    "\n" \
    "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its " \
    "value}.Do not use variables.\n" \
    "\n" \
    "{\n" \
    "    \"type\": \"function\",\n" \
    "    \"function\": {\n" \
    "        \"name\": \"get_weather\",\n" \
    "        \"description\": \"Get the current weather in a city\",\n" \
    "        \"parameters\": {\n" \
    "            \"type\": \"object\",\n" \
    "            \"properties\": {\n" \
    "                \"city\": {\n" \
    "                    \"type\": \"string\",\n" \
    "                    \"description\": \"City name\"\n" \
    "                },\n" \
    "                \"unit\": {\n" \
    "                    \"type\": \"string\",\n" \
    "                    \"enum\": [\n" \
    "                        \"celsius\",\n" \
    "                        \"fahrenheit\"\n" \
    "                    ]\n" \
    "                }\n" \
    "            },\n" \
    "            \"required\": [\n" \
    "                \"city\"\n" \
    "            ]\n" \
    "        }\n" \
    "    }\n" \
    "}\n" \
    "\n" \
    "What's the weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n" \
    "\n"
#define QWEN_TOOLS_PROMPT \
    "\n" \
    "# Tools\n" \
    "\n" \
    "You may call one or more functions to assist with the user query.\n" \
    "\n" \
    "You are provided with function signatures within <tools></tools> XML tags:\n" \
    "<tools>\n" \
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the curren" \
    "t weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": " \
    "\"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\"" \
    ", \"fahrenheit\"]}}, \"required\": [\"city\"]}}}\n" \
    "</tools>\n" \
    "\n" \
    "For each function call, return a json object with function name and arguments within <tool_call></to" \
    "ol_call> XML tags:\n" \
    "<tool_call>\n" \
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n" \
    "</tool_call><|im_end|>\n" \
    "<|im_start|>user\n" \
    "What's the weather in Paris?<|im_end|>\n" \
    "<|im_start|>assistant\n"
#define MISTRAL_TOOLS_PROMPT \
    "[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\"" \
    ": \"Get the current weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"c" \
    "ity\": {\"type\": \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"en" \
    "um\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"city\"]}}}][/AVAILABLE_TOOLS][INST]"

static const tpl_case k_cases[] = {
    {"llama2 / convo", k_llama2,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
     "<s>[INST] <<SYS>>\n"
     "Be brief.\n"
     "<</SYS>>\n"
     "\n"
     " Hi [/INST] Hello! </s><s>[INST] How are you? [/INST]",
     IX_OK, NULL, NULL},
    {"llama2 / no system", k_llama2,
     "{\"messages\": " NOSYS ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
     "<s>[INST] Hi [/INST] Hello! How can I help? </s><s>[INST] Tell me a joke. [/INST]",
     IX_OK, NULL, NULL},
    {"llama2 / roles out of order", k_llama2,
     "{\"messages\": " BAD_ORDER ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
     NULL,
     IX_ERR_INVALID, "Conversation roles must alternate user/assistant/user/assist", NULL},
    {"llama3 / convo", k_llama3,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|eot_id|>\"}",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "How are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n",
     IX_OK, NULL, NULL},
    {"llama3 / no generation prompt", k_llama3,
     "{\"messages\": " NOSYS ", \"add_generation_prompt\": false, \"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|eot_id|>\"}",
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "Hello! How can I help?<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Tell me a joke.<|eot_id|>",
     IX_OK, NULL, NULL},
    {"llama3.1 / convo", k_llama3_1,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|eot_id|>\"}",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "Cutting Knowledge Date: December 2023\n"
     "Today Date: 26 Jul 2024\n"
     "\n"
     "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "How are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n",
     IX_OK, NULL, NULL},
    {"llama3.1 / tools offered", k_llama3_1,
     "{\"messages\": " TOOL_ASK ", \"add_generation_prompt\": true, \"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|eot_id|>\", \"tools\": " TOOLS "}",
     LLAMA31_TOOL_PROMPT,
     IX_OK, NULL, NULL},
    {"llama3.1 / tool call and result", k_llama3_1,
     "{\"messages\": " TOOL_CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|eot_id|>\", \"tools\": " TOOLS "}",
     LLAMA31_TOOL_PROMPT
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}<|eot_id|><"
     "|start_header_id|>ipython<|end_header_id|>\n"
     "\n"
     "\"{\\\"temperature\\\": 22}\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n",
     IX_OK, NULL, NULL},
    {"llama3.1 / date_string", k_llama3_1,
     "{\"messages\": " ONE_TURN ", \"add_generation_prompt\": true, \"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|eot_id|>\", \"date_string\": \"01 Jan 2025\"}",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "Cutting Knowledge Date: December 2023\n"
     "Today Date: 01 Jan 2025\n"
     "\n"
     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n",
     IX_OK, NULL, NULL},
    {"llama3.1 / builtin tools", k_llama3_1,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"Search the news\"}, {\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"brave_search\", \"arguments\": {\"query\": \"news today\"}}}]}, {\"role\": \"ipython\", \"content\": \"[results]\"}], \"add_generation_prompt\": true, \"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|eot_id|>\", \"builtin_tools\": [\"brave_search\", \"code_interpreter\", \"wolfram_alpha\"]}",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "Environment: ipython\n"
     "Tools: brave_search, wolfram_alpha\n"
     "\n"
     "Cutting Knowledge Date: December 2023\n"
     "Today Date: 26 Jul 2024\n"
     "\n"
     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Search the news<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "<|python_tag|>brave_search.call(query=\"news today\")<|eom_id|><|start_header_id|>ipython<|end_heade"
     "r_id|>\n"
     "\n"
     "\"[results]\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n",
     IX_OK, NULL, NULL},
    {"llama3.1 / tools without a user message", k_llama3_1,
     "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}], \"add_generation_prompt\": true, \"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|eot_id|>\", \"tools\": " TOOLS "}",
     NULL,
     IX_ERR_INVALID, "Cannot put tools in the first user message when there's no f", NULL},
    {"mistral-v1 / convo", k_mistral_v1,
     "{\"messages\": " NOSYS ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
     "<s>[INST] Hi [/INST]Hello! How can I help?</s>[INST] Tell me a joke. [/INST]",
     IX_OK, NULL, NULL},
    {"mistral-v1 / system refused", k_mistral_v1,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
     NULL,
     IX_ERR_INVALID, "Conversation roles must alternate user/assistant/user/assist", NULL},
    {"mistral-v3 / convo", k_mistral_v3,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
     "<s>[INST]  Hi\n"
     "[/INST] Hello!</s>[INST] Be brief.\n"
     "\n"
     "How are you?[/INST]",
     IX_OK, NULL, NULL},
    {"mistral-v3 / tools", k_mistral_v3,
     "{\"messages\": " TOOL_CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"tools\": " TOOLS "}",
     "<s>"
     MISTRAL_TOOLS_PROMPT
     " What's the weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city"
     "\": \"Paris\", \"unit\": \"celsius\"}, \"id\": \"call12345\"}]</s>[TOOL_RESULTS] {\"content\": {\"te"
     "mperature\": 22}, \"call_id\": \"call12345\"}[/TOOL_RESULTS]",
     IX_OK, NULL, NULL},
    {"mistral-v3 / tool call id too short", k_mistral_v3,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {}}}]}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
     NULL,
     IX_ERR_INVALID, "Tool call IDs should be alphanumeric strings with length 9!", NULL},
    {"mistral-v7 / convo", k_mistral_v7,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"now_unix_s\": 1735689600}",
     "<s>[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST] Hi\n"
     "[/INST]Hello!</s>[INST]How are you?[/INST]",
     IX_OK, NULL, NULL},
    {"mistral-v7 / default system prompt", k_mistral_v7,
     "{\"messages\": " ONE_TURN ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"now_unix_s\": 1735689600}",
     "<s>[SYSTEM_PROMPT]You are Mistral Small 3, a Large Language Model (LLM) created by Mistral AI, a Fre"
     "nch startup headquartered in Paris.Your knowledge base was last updated on 2023-10-01. The current d"
     "ate is 2025-01-01.When you're not sure about some information, you say that you don't have the infor"
     "mation and don't make up anything.If the user's question is not clear, ambiguous, or does not provid"
     "e enough context for you to accurately answer the question, you do not try to answer it right away a"
     "nd you rather ask the user to clarify their request (e.g. \"What are some good restaurants around me"
     "?\" => \"Where are you?\" or \"When is the next flight to Tokyo\" => \"Where do you travel from?\")["
     "/SYSTEM_PROMPT][INST]Hi[/INST]",
     IX_OK, NULL, NULL},
    {"mistral-v7 / tools", k_mistral_v7,
     "{\"messages\": " TOOL_CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"tools\": " TOOLS ", \"now_unix_s\": 1735689600}",
     "<s>[SYSTEM_PROMPT]You are a helpful assistant that can call tools. If you call one or more tools, fo"
     "rmat them in a single JSON array or objects, where each object is a tool call, not as separate objec"
     "ts outside of an array or multiple arrays. Use the format [{\"name\": tool call name, \"arguments\":"
     " tool call arguments}, additional tool calls] if you call more than one tool. If you call tools, do "
     "not attempt to interpret them or otherwise provide a response until you receive a tool call result t"
     "hat you can interpret for the user.You are a helpful assistant.[/SYSTEM_PROMPT]"
     MISTRAL_TOOLS_PROMPT
     "What's the weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\""
     ": \"Paris\", \"unit\": \"celsius\"}, \"id\": \"call12345\"}]</s>[TOOL_RESULTS] {\"content\": {\"temp"
     "erature\": 22}, \"call_id\": \"call12345\"}[/TOOL_RESULTS]",
     IX_OK, NULL, NULL},
    {"mistral-v7 / content parts", k_mistral_v7,
     "{\"messages\": " PARTS ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"now_unix_s\": 1735689600}",
     "<s>[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Describe [IMG]this image.[/INST]",
     IX_OK, NULL, NULL},
    {"chatml / convo", k_chatml,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
     "<|im_start|>system\n"
     "Be brief.<|im_end|>\n"
     "<|im_start|>user\n"
     " Hi\n"
     "<|im_end|>\n"
     "<|im_start|>assistant\n"
     "Hello!<|im_end|>\n"
     "<|im_start|>user\n"
     "How are you?<|im_end|>\n"
     "<|im_start|>assistant\n",
     IX_OK, NULL, NULL},
    {"chatml / one user turn", k_chatml,
     "{\"messages\": " ONE_TURN ", \"add_generation_prompt\": false, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
     "<|im_start|>user\n"
     "Hi<|im_end|>\n",
     IX_OK, NULL, NULL},
    {"qwen2.5 / convo", k_qwen2_5,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": null, \"eos_token\": \"<|im_end|>\"}",
     "<|im_start|>system\n"
     "Be brief.<|im_end|>\n"
     "<|im_start|>user\n"
     " Hi\n"
     "<|im_end|>\n"
     "<|im_start|>assistant\n"
     "Hello!<|im_end|>\n"
     "<|im_start|>user\n"
     "How are you?<|im_end|>\n"
     "<|im_start|>assistant\n",
     IX_OK, NULL, NULL},
    {"qwen2.5 / default system prompt", k_qwen2_5,
     "{\"messages\": " ONE_TURN ", \"add_generation_prompt\": true, \"bos_token\": null, \"eos_token\": \"<|im_end|>\"}",
     "<|im_start|>system\n"
     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\n"
     "Hi<|im_end|>\n"
     "<|im_start|>assistant\n",
     IX_OK, NULL, NULL},
    {"qwen2.5 / tools offered", k_qwen2_5,
     "{\"messages\": " TOOL_ASK ", \"add_generation_prompt\": true, \"bos_token\": null, \"eos_token\": \"<|im_end|>\", \"tools\": " TOOLS "}",
     "<|im_start|>system\n"
     "You are a helpful assistant.\n"
     QWEN_TOOLS_PROMPT,
     IX_OK, NULL, NULL},
    {"qwen2.5 / tool call and result", k_qwen2_5,
     "{\"messages\": " TOOL_CONVO ", \"add_generation_prompt\": true, \"bos_token\": null, \"eos_token\": \"<|im_end|>\", \"tools\": " TOOLS "}",
     "<|im_start|>system\n"
     "You are a helpful assistant.\n"
     QWEN_TOOLS_PROMPT
     "<tool_call>\n"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "<tool_response>\n"
     "{\"temperature\": 22}\n"
     "</tool_response><|im_end|>\n"
     "<|im_start|>assistant\n",
     IX_OK, NULL, NULL},
    {"qwen3 / thinking history", k_qwen3,
     "{\"messages\": " THINK ", \"add_generation_prompt\": true, \"bos_token\": null, \"eos_token\": \"<|im_end|>\"}",
     "<|im_start|>user\n"
     "2+2?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "4<|im_end|>\n"
     "<|im_start|>user\n"
     "3+3?<|im_end|>\n"
     "<|im_start|>assistant\n",
     IX_OK, NULL, NULL},
    {"qwen3 / tools, thinking off", k_qwen3,
     "{\"messages\": " TOOL_CONVO_NOSYS ", \"add_generation_prompt\": true, \"bos_token\": null, \"eos_token\": \"<|im_end|>\", \"tools\": " TOOLS ", \"enable_thinking\": false}",
     "<|im_start|>system"
     QWEN_TOOLS_PROMPT
     "<tool_call>\n"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "<tool_response>\n"
     "{\"temperature\": 22}\n"
     "</tool_response><|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "\n"
     "</think>\n"
     "\n",
     IX_OK, NULL, NULL},
    {"phi3 / convo", k_phi3,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"<|endoftext|>\"}",
     "<s><|user|>\n"
     " Hi\n"
     "<|end|>\n"
     "<|assistant|>\n"
     "Hello!<|end|>\n"
     "<|user|>\n"
     "How are you?<|end|>\n"
     "<|assistant|>\n",
     IX_OK, NULL, NULL},
    {"phi3-small / convo", k_phi3_small,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"<|endoftext|>\"}",
     "<s><|system|>\n"
     "Be brief.<|end|>\n"
     "<|user|>\n"
     " Hi\n"
     "<|end|>\n"
     "<|assistant|>\n"
     "Hello!<|end|>\n"
     "<|user|>\n"
     "How are you?<|end|>\n"
     "<|assistant|>\n",
     IX_OK, NULL, NULL},
    {"phi3-small / no generation prompt", k_phi3_small,
     "{\"messages\": " ONE_TURN ", \"add_generation_prompt\": false, \"bos_token\": \"<s>\", \"eos_token\": \"<|endoftext|>\"}",
     "<s><|user|>\n"
     "Hi<|end|>\n"
     "<|endoftext|>",
     IX_OK, NULL, NULL},
    {"gemma / convo", k_gemma,
     "{\"messages\": " NOSYS ", \"add_generation_prompt\": true, \"bos_token\": \"<bos>\", \"eos_token\": \"<eos>\"}",
     "<bos><start_of_turn>user\n"
     "Hi<end_of_turn>\n"
     "<start_of_turn>model\n"
     "Hello! How can I help?<end_of_turn>\n"
     "<start_of_turn>user\n"
     "Tell me a joke.<end_of_turn>\n"
     "<start_of_turn>model\n",
     IX_OK, NULL, NULL},
    {"gemma / system refused", k_gemma,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<bos>\", \"eos_token\": \"<eos>\"}",
     NULL,
     IX_ERR_INVALID, "System role not supported", NULL},
    {"gemma3 / convo", k_gemma3,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<bos>\", \"eos_token\": \"<eos>\"}",
     "<bos><start_of_turn>user\n"
     "Be brief.\n"
     "\n"
     "Hi<end_of_turn>\n"
     "<start_of_turn>model\n"
     "Hello!<end_of_turn>\n"
     "<start_of_turn>user\n"
     "How are you?<end_of_turn>\n"
     "<start_of_turn>model\n",
     IX_OK, NULL, NULL},
    {"gemma3 / content parts", k_gemma3,
     "{\"messages\": " PARTS ", \"add_generation_prompt\": true, \"bos_token\": \"<bos>\", \"eos_token\": \"<eos>\"}",
     "<bos><start_of_turn>user\n"
     "Be brief.\n"
     "\n"
     "Describe<start_of_image>this image.<end_of_turn>\n"
     "<start_of_turn>model\n",
     IX_OK, NULL, NULL},
    {"gemma3 / roles out of order", k_gemma3,
     "{\"messages\": " BAD_ORDER ", \"add_generation_prompt\": true, \"bos_token\": \"<bos>\", \"eos_token\": \"<eos>\"}",
     NULL,
     IX_ERR_INVALID, "Conversation roles must alternate user/assistant/user/assist", NULL},
    {"zephyr / convo", k_zephyr,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
     "<|system|>\n"
     "Be brief.</s>\n"
     "<|user|>\n"
     " Hi\n"
     "</s>\n"
     "<|assistant|>\n"
     "Hello!</s>\n"
     "<|user|>\n"
     "How are you?</s>\n"
     "<|assistant|>\n",
     IX_OK, NULL, NULL},
    {"zephyr / no generation prompt", k_zephyr,
     "{\"messages\": " NOSYS ", \"add_generation_prompt\": false, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
     "<|user|>\n"
     "Hi</s>\n"
     "<|assistant|>\n"
     "Hello! How can I help?</s>\n"
     "<|user|>\n"
     "Tell me a joke.</s>\n",
     IX_OK, NULL, NULL},
    {"deepseek / convo", k_deepseek,
     "{\"messages\": " CONVO ", \"add_generation_prompt\": true, \"bos_token\": \"<｜begin▁of▁sentence｜>\", \"eos_token\": \"<｜end▁of▁sentence｜>\"}",
     "<｜begin▁of▁sentence｜>Be brief.\n"
     "\n"
     "User:  Hi\n"
     "\n"
     "\n"
     "Assistant: Hello!<｜end▁of▁sentence｜>User: How are you?\n"
     "\n"
     "Assistant:",
     IX_OK, NULL, NULL},
    {"deepseek-r1 / thinking history", k_deepseek_r1,
     "{\"messages\": " THINK_SYS ", \"add_generation_prompt\": true, \"bos_token\": \"<｜begin▁of▁sentence｜>\", \"eos_token\": \"<｜end▁of▁sentence｜>\"}",
     "<｜begin▁of▁sentence｜>Be brief.<｜User｜>2+2?<｜Assistant｜>\n"
     "\n"
     "4<｜end▁of▁sentence｜><｜User｜>3+3?<｜Assistant｜><think>\n",
     IX_OK, NULL, NULL},
    {"deepseek-r1 / tool call and result", k_deepseek_r1,
     "{\"messages\": " TOOL_CONVO_STRARGS ", \"add_generation_prompt\": true, \"bos_token\": \"<｜begin▁of▁sentence｜>\", \"eos_token\": \"<｜end▁of▁sentence｜>\", \"tools\": " TOOLS "}",
     "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>What's the weather in Paris?<｜Assistant｜><｜"
     "tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
     "```json\n"
     "{\"city\": \"Paris\", \"unit\": \"celsius\"}\n"
     "```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>"
     "{\"temperature\": 22}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>",
     IX_OK, NULL, NULL},
    {"gpt2 / convo", k_gpt2,
     "{\"messages\": " NOSYS ", \"add_generation_prompt\": true, \"bos_token\": \"<|endoftext|>\", \"eos_token\": \"<|endoftext|>\"}",
     "Hi<|endoftext|>Hello! How can I help?<|endoftext|>Tell me a joke.<|endoftext|>",
     IX_OK, NULL, NULL},
};

#endif /* INFERX_TEMPLATE_MODELS_TABLE_H */
