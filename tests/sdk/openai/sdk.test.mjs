// The official openai npm SDK against corral-proxy, started (with corral-fake-llm behind it) by
// tests/integration/proxy_sdk_test.cc, which passes the base URL and session tokens in the environment.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.CORRAL_BASE_URL;
const client = (apiKey) => new OpenAI({ apiKey, baseURL, maxRetries: 0, timeout: 20000 });
const chat = client(process.env.CORRAL_TOKEN);

test('chat completion', async () => {
  const r = await chat.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hello' }] });
  assert.equal(r.choices[0].message.content, 'echo: hello');
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(r.choices[0].token_ids, undefined, 'captured token ids are stripped for an agent that did not ask');
});

test('streamed chat completion arrives in chunks', async () => {
  const stream = await chat.chat.completions.create({
    model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'stream me please' }],
  });
  let text = '';
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    text += chunk.choices[0]?.delta?.content ?? '';
  }
  assert.equal(text, 'echo: stream me please');
  assert.ok(chunks >= 4, `expected one chunk per token, got ${chunks}`);
});

test('tool calls, then the tool result', async () => {
  const tools = [{ type: 'function', function: { name: 'bash', parameters: { type: 'object', properties: {} } } }];
  const messages = [{ role: 'user', content: 'list files' }];
  const r = await chat.chat.completions.create({ model: 'gpt-4o', messages, tools });
  const call = r.choices[0].message.tool_calls[0];
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(call.function.name, 'bash');
  assert.deepEqual(Object.keys(JSON.parse(call.function.arguments)), ['step']);
  messages.push(r.choices[0].message, { role: 'tool', tool_call_id: call.id, content: 'a.txt' });
  const r2 = await chat.chat.completions.create({ model: 'gpt-4o', messages, tools });
  assert.equal(r2.choices[0].message.content, 'echo: list files');
});

test('streamed tool call arguments assemble', async () => {
  const tools = [{ type: 'function', function: { name: 'python', parameters: { type: 'object' } } }];
  const stream = await chat.chat.completions.create({
    model: 'gpt-4o', stream: true, tools, messages: [{ role: 'user', content: 'compute' }],
  });
  let args = '';
  let name = '';
  for await (const chunk of stream) {
    const tc = chunk.choices[0]?.delta?.tool_calls?.[0];
    if (tc?.function?.name) name = tc.function.name;
    args += tc?.function?.arguments ?? '';
  }
  assert.equal(name, 'python');
  assert.ok(JSON.parse(args).step > 0);
});

test('legacy completions and models', async () => {
  const r = await chat.completions.create({ model: 'gpt-4o', prompt: 'abc' });
  assert.equal(r.choices[0].text, 'echo: abc');
  const models = [];
  for await (const m of chat.models.list()) models.push(m.id);
  assert.ok(models.includes('fake-model'), models.join(','));
});

test('a forged token is an AuthenticationError (401)', async () => {
  await assert.rejects(
    client('ep-x.forged').chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

test('a closed session is an APIError with status 410', async () => {
  await assert.rejects(
    client(process.env.CORRAL_CLOSED_TOKEN).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.APIError && e.status === 410 && e.code === 'session_closed');
});

test('an exhausted budget is a BadRequestError (400) with code budget_exhausted', async () => {
  const budget = client(process.env.CORRAL_BUDGET_TOKEN);
  const ok = await budget.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'one' }] });
  assert.equal(ok.choices[0].message.content, 'echo: one');
  await assert.rejects(
    budget.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'two' }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.code === 'budget_exhausted');
});

test('a model outside the allow-list is a BadRequestError', async () => {
  const budget = client(process.env.CORRAL_BUDGET_TOKEN);
  await assert.rejects(
    budget.chat.completions.create({ model: 'not-allowed', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.BadRequestError && (e.code === 'model_not_allowed' || e.code === 'budget_exhausted'));
});

test('the Responses API, over a chat-only backend', async () => {
  const r = await chat.responses.create({ model: 'gpt-4o', instructions: 'Be brief.', input: 'hello' });
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.equal(r.output_text, 'echo: hello');
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0, JSON.stringify(r.usage));
});

test('a streamed response arrives as output_text deltas and assembles', async () => {
  const stream = chat.responses.stream({ model: 'gpt-4o', input: [{ role: 'user', content: 'stream me please' }] });
  let deltas = 0;
  stream.on('response.output_text.delta', () => deltas++);
  const r = await stream.finalResponse();  // (the SDK sets output_text only on unstreamed responses)
  const text = r.output.filter((i) => i.type === 'message').flatMap((i) => i.content).map((c) => c.text).join('');
  assert.equal(text, 'echo: stream me please');
  assert.equal(r.status, 'completed');
  assert.ok(deltas >= 4, `expected one delta per token, got ${deltas}`);
});

test('Responses function calls, then their output', async () => {
  const tools = [{ type: 'function', name: 'bash', parameters: { type: 'object', properties: {} }, strict: false }];
  const input = [{ role: 'user', content: 'list files' }];
  const r = await chat.responses.create({ model: 'gpt-4o', tools, input });
  const call = r.output.find((item) => item.type === 'function_call');
  assert.equal(call.name, 'bash');
  assert.deepEqual(Object.keys(JSON.parse(call.arguments)), ['step']);
  input.push(...r.output, { type: 'function_call_output', call_id: call.call_id, output: 'a.txt' });
  const r2 = await chat.responses.create({ model: 'gpt-4o', tools, input });
  assert.equal(r2.output_text, 'echo: list files');
});

test('previous_response_id is refused: the proxy keeps no responses', async () => {
  await assert.rejects(
    chat.responses.create({ model: 'gpt-4o', input: 'x', previous_response_id: 'resp_1' }),
    (e) => e instanceof OpenAI.BadRequestError && /previous_response_id/.test(e.message));
});
