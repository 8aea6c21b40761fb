// bpe_cases.mjs: the reference side of test_text. Writes to stdout, for
// random and adversarial texts, each text's UTF-8 bytes and the ids
// js-tiktoken's r50k_base (GPT-2's encoding) gives them, as ordinary text;
// with "special", "<|endoftext|>" in the text is the token 50256
// (allowedSpecial "all").
// Usage: node bpe_cases.mjs SEED COUNT [special]
// Output, little endian, per case: uint32 bytes, the bytes, uint32 ids, the
// int32 ids; the stream ends with a uint32 0xFFFFFFFF.
import { getEncoding } from "js-tiktoken";

const seed = Number(process.argv[2] ?? 1);
const count = Number(process.argv[3] ?? 1000);
const special = process.argv[4] === "special";
const enc = getEncoding("r50k_base");

// mulberry32: a seeded generator, so a failure replays.
let state = seed >>> 0;
function rand() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const range = (lo, hi) => String.fromCodePoint(int(lo, hi));

// Letters, digits, marks and symbols of many scripts, from blocks assigned
// long before Unicode 14 (PCRE2's tables may be older than Node's).
const scripts = [
  () => range(0x61, 0x7a), () => range(0x41, 0x5a), () => range(0xc0, 0xd6),
  () => range(0xe0, 0xf6), () => range(0x391, 0x3a9), () => range(0x3b1, 0x3c9),
  () => range(0x410, 0x44f), () => range(0x5d0, 0x5ea), () => range(0x621, 0x63a),
  () => range(0x641, 0x64a), () => range(0x905, 0x939), () => range(0x93e, 0x94c),
  () => range(0xe01, 0xe30), () => range(0x4e00, 0x9fa5), () => range(0x3041, 0x3096),
  () => range(0x30a1, 0x30fa), () => range(0xac00, 0xd7a3), () => range(0x10a0, 0x10c5),
  () => range(0x531, 0x556), () => "\u0301", () => "\u200d",
];
const digits = [
  () => range(0x30, 0x39), () => range(0x660, 0x669), () => range(0x966, 0x96f),
  () => range(0xff10, 0xff19), () => pick(["\u00b2", "\u00b3", "\u00bd", "\u2162", "\u216b"]),
];
const emoji = [
  () => range(0x1f600, 0x1f64f), () => range(0x1f300, 0x1f5ff),
  () => "\u{1f468}\u200d\u{1f469}\u200d\u{1f467}", () => "\u{1f44d}" + range(0x1f3fb, 0x1f3ff),
  () => "\u2764\ufe0f", () => range(0x1f1e6, 0x1f1ff) + range(0x1f1e6, 0x1f1ff),
];
const punct = [
  () => range(0x21, 0x2f), () => range(0x3a, 0x40), () => range(0x5b, 0x60),
  () => range(0x7b, 0x7e), () => pick(["\u201c", "\u201d", "\u2014", "\u2026", "\u00ab",
    "\u00bb", "\u00bf", "\u00a1", "\u3001", "\u3002", "\u2019", "\u20ac", "\u00a9"]),
  () => range(0x0, 0x8), () => range(0xe, 0x1f), () => "\x7f",
];
const spaces = [
  () => " ", () => " ", () => " ", () => "  ", () => "\t", () => "\n", () => "\r\n",
  () => "\n\n", () => " ".repeat(int(2, 40)), () => "\u00a0", () => range(0x2000, 0x200a),
  () => "\u3000", () => "\u2028", () => "\u202f", () => "\ufeff", () => "\u0085",
  () => "\u180e", () => "\x0b", () => "\x0c", () => " \n ",
];
const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'x",
  "''", "'", "\u2019s", " 's", "'ss", "'lll"];
const words = ["the", "The", "hello", "world", "don't", "it's", "we're", "I'm", "they'll",
  "she'd", "you've", "GPT", "remat", "1234567", "3.14159", "2024-05-20", "<|endoftext|>",
  "<|endoftext", "http://example.com/a?b=c", "foo_bar", "camelCase", "__init__", "C++",
  "naïve", "café", "Ελληνικά", "русский", "日本語", "한국어", "हिन्दी", "עברית", "العربية"];

function run(gen, lo, hi) {
  let s = "";
  const n = int(lo, hi);
  for (let i = 0; i < n; i++) s += gen();
  return s;
}

function randomText() {
  let s = "";
  const parts = int(1, 40);
  for (let i = 0; i < parts; i++) {
    const r = rand();
    if (r < 0.30) s += run(pick(scripts), 1, 12);
    else if (r < 0.40) s += run(() => pick(scripts)(), 1, 8);
    else if (r < 0.50) s += run(pick(digits), 1, 9);
    else if (r < 0.58) s += run(() => pick(emoji)(), 1, 4);
    else if (r < 0.68) s += run(() => pick(punct)(), 1, 5);
    else if (r < 0.75) s += pick(contractions);
    else if (r < 0.85) s += pick(words);
    else s += run(() => pick(spaces)(), 1, 4);
    if (rand() < 0.5) s += " ";
  }
  return s;
}

const adversarial = [
  "", " ", "  ", "\n", "\n\n\n", " \n", "\n ", " \n ", "a", "'", "'s", "''s", "'''", "'s's",
  "it's", "IT'S", " 's", "'s ", "x's y'll z'd", "'ve'", "a   b", "a \t\nb", "hello  world",
  "hello ", "hello  ", "hello\n\n", "   hello", "123456789012345678901234567890", " 1 2 3",
  "abc123def456", "ab<|endoftext|>cd", "<|endoftext|>", "<|endoftext|><|endoftext|>",
  "<|endoftext|> x<|endoftext|>", " <|endoftext|>\n", "<<|endoftext|>>", "<|endoftext|<|endoftext|>",
  "<|endof", "$$$$$$$$", "....", "!".repeat(300),
  " ".repeat(1), " ".repeat(2), " ".repeat(3), " ".repeat(7), " ".repeat(64), " ".repeat(1000),
  " ".repeat(1500) + "x", "x" + " ".repeat(999) + "\n", "\n".repeat(500), "\t".repeat(300),
  " \t".repeat(200), "\r\n".repeat(200), "x".repeat(1500), "ab".repeat(700),
  "\u{1f600}".repeat(200), "\u{1f468}\u200d\u{1f469}\u200d\u{1f467}".repeat(20),
  "\u00a0\u00a0x", "x\u3000\u3000", "\ufeffhello", "a\u0085b", "a\u180eb", "\u0000\u0001\u0002",
  // Pieces longer than the longest token are merged by the heap, not the cache
  // (remat's own test compares longer ones with a plain merge loop).
  "\ud800abc", "abc\udc00", "\ud83d", "e\u0301\u0301\u0301", "9".repeat(1000),
  "Hello, world! How's it going? I'm fine; they'll see.\n\nNew paragraph:\t\ttabs and  spaces.",
  "   leading and trailing   ", "’s ’t ’re", "日本語のテキスト、句読点。", "Ünïcödé wörds ând ñ",
];

const chunks = [];
function emit(text) {
  const bytes = new TextEncoder().encode(text);
  const ids = special ? enc.encode(text, "all") : enc.encode(text, [], []);
  const head = Buffer.alloc(4);
  head.writeUInt32LE(bytes.length);
  chunks.push(head, Buffer.from(bytes));
  const body = Buffer.alloc(4 + 4 * ids.length);
  body.writeUInt32LE(ids.length);
  ids.forEach((id, i) => body.writeInt32LE(id, 4 + 4 * i));
  chunks.push(body);
}

for (const t of adversarial) emit(t);
for (let i = 0; i < count; i++) emit(randomText());
const end = Buffer.alloc(4);
end.writeUInt32LE(0xffffffff);
chunks.push(end);
process.stdout.write(Buffer.concat(chunks));
