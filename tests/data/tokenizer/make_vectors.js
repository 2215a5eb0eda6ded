// Writes the expected encodings tokenizer_test checks, from sources independent of ServeLab:
//   - the published test plans of the npm package gpt-tokenizer 4.0.0 (data/TestPlans.txt:
//     r50k_base = GPT-2, cl100k_base), copied as they are;
//   - the package encoders run under node on further texts (whitespace runs, newlines, numbers,
//     contractions, emoji, CJK): gpt-tokenizer's cl100k_base for cl100k, and for GPT-2 both
//     gpt-3-encoder 1.1.4 and gpt-tokenizer's gpt2 (r50k), which must agree.
// Usage (with both packages unpacked by `npm pack` + tar):
//   node make_vectors.js GPT_TOKENIZER_DIR GPT3_ENCODER_DIR OUT_DIR
const fs = require('fs');
const path = require('path');
const [gtDir, g3Dir, outDir] = process.argv.slice(2);
const cl100k = require(path.join(gtDir, 'cjs/encoding/cl100k_base.js'));
const r50k = require(path.join(gtDir, 'cjs/encoding/gpt2.js'));
const gpt3 = require(path.join(g3Dir, 'index.js'));

const plans = {r50k_base: [], cl100k_base: []};
const lines = fs.readFileSync(path.join(gtDir, 'data/TestPlans.txt'), 'utf8').split('\n');
for (let i = 0; i + 2 < lines.length; ++i) {
  if (!lines[i].startsWith('EncodingName: ')) continue;
  const name = lines[i].slice('EncodingName: '.length);
  if (!(name in plans)) continue;
  const text = lines[i + 1].slice('Sample: '.length);
  const ids = JSON.parse(lines[i + 2].slice('Encoded: '.length));
  plans[name].push({text, ids, source: 'gpt-tokenizer 4.0.0 data/TestPlans.txt'});
}

const texts = [
  'Hello world', '  two leading spaces', 'trailing spaces   ', 'a  b   c    d',
  'tabs\tand\nnewlines\n\n\nend\n', 'mixed\r\nwindows\r\nline ends\r\n', '   \n  \n\t\n',
  "I'm sure you're right, they'll see we've won; he'd say she's fine and it's OK.",
  "I'M SURE YOU'RE RIGHT, THEY'LL SEE WE'VE WON", "don't 'quoted' '''",
  '1234567890 3.14159 1,000,000 2024-11-25 0x7fff 12345678901234567890',
  'emoji 😀👍🏽 family 👨‍👩‍👧 flags 🇫🇷🇯🇵', '中文测试，日本語のテキスト、한국어 문장입니다.',
  'Ünïcödé àccénts, Ελληνικά, русский текст, עברית, العربية, हिन्दी',
  'code: for (int i = 0; i < n; ++i) { x += y[i] * 2; } // done',
  '\u00a0nbsp and\u2003em space\u3000ideographic', '$$$ !!! ??? ... --- ***',
  '    def f(x):\n        return x ** 2\n\n\nprint(f(3))\n',
  'The quick brown fox jumps over the lazy dog. ' +
      'Pack my box with five dozen liquor jugs!\n\nSphinx of black quartz, judge my vow.',
  'x'.repeat(100) + ' ' + 'ab'.repeat(40),
  // Unicode classes and whitespace at the edges of the split patterns. (Not U+FEFF: JavaScript's
  // \s includes it, tiktoken's and Hugging Face's \s (Unicode White_Space) do not.)
  '\u0085next line, vertical\u000btab, form\u000cfeed, \u2028line \u2029paragraph',
  'numbers beyond ASCII: Ⅻ ½ ² ٣٤٥٦٧ ৩৪ 一二三', 'letters: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ǅungla ʰmodifier ﬁ',
  "'S'T'RE'VE'M'LL'D 's't're've'm'll'd don’t", '  \n  x', 'end with spaces\n   ',
  '\t\t\tx \t \n\t', 'a\u0301\u0301\u0301 e\u200db \u00ad soft',
];
const gpt2Extra = [], cl100kExtra = [];
for (const text of texts) {
  const a = gpt3.encode(text), b = r50k.encode(text);
  if (JSON.stringify(a) !== JSON.stringify(b)) {
    console.error('gpt-3-encoder and gpt-tokenizer r50k disagree on', JSON.stringify(text));
  } else {
    gpt2Extra.push({text, ids: a, source: 'gpt-3-encoder 1.1.4 and gpt-tokenizer 4.0.0 gpt2'});
  }
  cl100kExtra.push({text, ids: cl100k.encode(text), source: 'gpt-tokenizer 4.0.0 cl100k_base'});
}
const write = (name, cases) => fs.writeFileSync(path.join(outDir, name),
    JSON.stringify({cases}, null, 0).replace(/\},\{/g, '},\n{') + '\n');
write('gpt2_vectors.json', plans.r50k_base.concat(gpt2Extra));
write('cl100k_vectors.json', plans.cl100k_base.concat(cl100kExtra));
