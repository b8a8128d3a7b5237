#!/usr/bin/env node
// trident serve through OpenAI's official client (npm openai 6.30.1, installed by scripts/test-deps.sh):
// models.list, completions (whole and streamed) and chat completions (whole and streamed) on the
// e2e/gen_models GPT-2 checkpoint with a ChatML-style chat template. The chat's prompt is rendered
// here by @huggingface/jinja (transformers.js's renderer) from the same tokenizer_config.json and sent
// to /v1/completions: the chat answer must be that completion's text and use as many prompt tokens,
// so the server's template, its special tokens and its tokenization are held to the reference.
// Every wait is bounded. Usage: openai_client.js TRIDENT MODEL VOCAB MERGES NODE_MODULES WORK
'use strict';
const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');

const [trident, model, vocab, merges, modules, work] = process.argv.slice(2);
const scale = Number(process.env.TD_TIME_SCALE || '1');
for (const m of ['openai', '@huggingface/jinja']) {
  if (!fs.existsSync(path.join(modules, m))) {
    console.log(`${path.join(modules, m)} is missing: run scripts/test-deps.sh (make test does): skipped`);
    process.exit(77);
  }
}
const OpenAI = require(path.join(path.resolve(modules), 'openai')).default;
const { Template } = require(path.join(path.resolve(modules), '@huggingface', 'jinja'));

let passed = 0, failed = 0;
const ok = (m) => { passed++; console.log('ok: ' + m); };
const bad = (m) => { failed++; console.log('FAIL: ' + m); };
const same = (got, want, what) => (JSON.stringify(got) === JSON.stringify(want) ? ok(`${what}: ${JSON.stringify(got).slice(0, 80)}`)
  : bad(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`));

fs.rmSync(work, { recursive: true, force: true });
fs.mkdirSync(work, { recursive: true });
// ChatML as Qwen writes it, with a raise for a conversation that opens with the assistant
const config = {
  bos_token: null,
  eos_token: '<|endoftext|>',
  chat_template: "{% if messages[0]['role'] == 'assistant' %}{{ raise_exception('Conversation must start with a user or system message') }}{% endif %}" +
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] | trim + '<|im_end|>\\n' }}{% endfor %}" +
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
};
const cfgFile = path.join(work, 'tokenizer_config.json');
fs.writeFileSync(cfgFile, JSON.stringify(config));
const port = 20000 + Math.floor(Math.random() * 20000);
const log = fs.openSync(path.join(work, 'serve.log'), 'w');
const server = spawn(trident, ['serve', '--load', model, '--vocab-file', vocab, '--merge-file', merges, '--port', String(port),
  '--chat-template', cfgFile], { stdio: ['ignore', log, log], env: { ...process.env, OMP_NUM_THREADS: '1' } });
let exited = null;
server.on('exit', (code) => { exited = code; });
const deadline = setTimeout(() => { console.log('FAIL: the test ran past its bound'); server.kill('SIGKILL'); process.exit(1); },
  120000 * scale);

const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none', maxRetries: 0, timeout: 30000 * scale });

async function up() {
  for (let i = 0; i < 200 * scale; i++) {
    if (exited !== null) throw new Error(`trident serve exited ${exited}: ${fs.readFileSync(path.join(work, 'serve.log'), 'utf8')}`);
    try { return await client.models.list(); } catch (e) { await new Promise((r) => setTimeout(r, 100)); }
  }
  throw new Error('trident serve did not answer');
}

async function streamed(stream, pick) {
  let text = '', finish = null, n = 0;
  for await (const chunk of stream) {
    n++;
    for (const c of chunk.choices) {
      text += pick(c) || '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, n };
}

(async () => {
  const models = await up();
  const ids = [];
  for await (const m of models) ids.push(m.id);
  same(ids, ['trident'], 'models.list');

  // completions, whole and streamed: the same text
  const req = { model: 'trident', prompt: 'First Citizen:', max_tokens: 8, temperature: 0 };
  const whole = await client.completions.create(req);
  const s = await streamed(await client.completions.create({ ...req, stream: true }), (c) => c.text);
  same(s.text, whole.choices[0].text, 'completions streamed (' + s.n + ' events) = whole');
  same(s.finish, whole.choices[0].finish_reason, 'completions finish_reason streamed = whole');
  same(whole.usage.completion_tokens, 8, 'completions usage.completion_tokens');

  // chat: the answer is the completion of the reference's rendering of the conversation
  const messages = [{ role: 'system', content: 'You are terse. ' }, { role: 'user', content: 'Who speaks first? "Caf\u00e9" {{x}}' },
    { role: 'assistant', content: 'The citizen.' }, { role: 'user', content: 'And then?' }];
  const rendered = new Template(config.chat_template).render({ messages, add_generation_prompt: true, bos_token: null,
    eos_token: config.eos_token, tools: null, documents: null });
  const chat = await client.chat.completions.create({ model: 'trident', messages, max_tokens: 10, temperature: 0 });
  const ref = await client.completions.create({ model: 'trident', prompt: rendered, max_tokens: 10, temperature: 0 });
  same(chat.object, 'chat.completion', 'chat object');
  same(chat.choices[0].message.role, 'assistant', 'chat message role');
  same(chat.choices[0].message.content, ref.choices[0].text, 'chat content = the completion of @huggingface/jinja\'s rendering');
  same(chat.usage.prompt_tokens, ref.usage.prompt_tokens, 'chat prompt tokens = the rendering\'s');
  same(chat.choices[0].finish_reason, ref.choices[0].finish_reason, 'chat finish_reason');
  const cs = await streamed(await client.chat.completions.create({ model: 'trident', messages, max_tokens: 10, temperature: 0,
    stream: true }), (c) => c.delta && c.delta.content);
  same(cs.text, chat.choices[0].message.content, 'chat streamed (' + cs.n + ' events) = whole');
  same(cs.finish, chat.choices[0].finish_reason, 'chat finish_reason streamed = whole');
  // sampled (temperature 1, one seed): the tokens drawn depend on every logit of the prompt, so a
  // prompt of other tokens would draw another text
  const sreq = { model: 'trident', max_tokens: 12, temperature: 1, seed: 7 };
  const schat = await client.chat.completions.create({ ...sreq, messages });
  const sref = await client.completions.create({ ...sreq, prompt: rendered });
  same(schat.choices[0].message.content, sref.choices[0].text, 'sampled chat (seed 7) = the sampled completion of the rendering');
  const other = await client.completions.create({ ...sreq, prompt: rendered.replace('And then?', 'And after?') });
  if (other.choices[0].text !== sref.choices[0].text) ok('another prompt draws another text: ' + JSON.stringify(other.choices[0].text));
  else bad('the sampled text does not depend on the prompt: the comparison above holds nothing');
  const two = await client.chat.completions.create({ model: 'trident', messages, max_tokens: 4, temperature: 0, n: 2 });
  same(two.choices.map((c) => c.index), [0, 1], 'chat n 2: two choices');
  same(two.choices[1].message.content, two.choices[0].message.content, 'chat n 2 greedy: the same text');

  // refusals through the client: the template's raise_exception, a field chat does not honour
  for (const [what, body, want] of [
    ['a conversation the template refuses', { messages: [{ role: 'assistant', content: 'hi' }] },
      'raise_exception: Conversation must start with a user or system message'],
    ['logprobs on chat', { messages, logprobs: true }, '"logprobs" is not supported yet'],
    ['no messages', { messages: [] }, '"messages" must be a list of at least one'],
  ]) {
    try {
      await client.chat.completions.create({ model: 'trident', max_tokens: 2, ...body });
      bad(`${what}: answered`);
    } catch (e) {
      const body = e.error; // the parsed body's "error": trident's is a string
      const msg = typeof body === 'string' ? body : body && typeof body.error === 'string' ? body.error
        : body && body.message ? body.message : String(e.message);
      if (e.status === 400 && msg.includes(want)) ok(`${what}: 400, ${msg.slice(0, 90)}`);
      else bad(`${what}: status ${e.status}, ${msg}`);
    }
  }
})().catch((e) => bad('the client: ' + (e.stack || e))).finally(() => {
  server.kill('SIGTERM');
  const wait = setInterval(() => {
    if (exited === null) return;
    clearInterval(wait);
    clearTimeout(deadline);
    if (exited !== 0) bad(`trident serve exited ${exited} on SIGTERM`);
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed ? 1 : 0);
  }, 50);
});
