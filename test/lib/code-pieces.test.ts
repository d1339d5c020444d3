import { createHash } from 'node:crypto'
import t from 'tap'
import { CodePieces } from '../../lib/code-pieces.js'

const MARK = '\ue000code\ue001'
const piecesOf = (pieces: readonly string[]): CodePieces => CodePieces.split(pieces.join(MARK), MARK)

t.test('a part is its output with the code where the mark stood, once or as often as it stood there', async (t) => {
  t.equal(piecesOf(['Your code: ', '\n']).splice('042917'), 'Your code: 042917\n')
  t.equal(piecesOf(['Your code: ', '\n']).codes, 1)
  t.equal(piecesOf(['A subject']).splice('042917'), 'A subject', 'a part without the mark is the output itself')
  t.equal(piecesOf(['A subject']).codes, 0)
  t.equal(piecesOf(['a', 'b', 'c']).splice('1'), 'a1b1c')
  t.equal(piecesOf(['a', 'b', 'c']).codes, 2)
  t.equal(piecesOf(['é 🙂 ', ' ÿ']).splice('0'), 'é 🙂 0 ÿ', 'pieces beyond Latin-1 and within it alike')
})

t.test('a part\'s pieces are stored once under one name, whatever they contain', async (t) => {
  const samples: string[][] = [['Your code: ', '\n'], ['', ''], ['\n[1,2]\n', ' é 🙂 \ud800 ', '{"x":1}'], ['.\n'.repeat(32 * 1024), '<p>'.repeat(1000)]]
  for (const pieces of samples) {
    const rendered = piecesOf(pieces)
    const stored = rendered.stored
    const back = CodePieces.fromStored(stored.value)
    t.equal(back?.splice('042917'), pieces.join('042917'), 'the value gives the part back')
    t.equal(back?.stored.value, stored.value, 'and the same value again')
    t.equal(rendered.stored, stored, 'computed once per render')
    t.equal(piecesOf(pieces).stored.id, stored.id, 'the same pieces rendered again (by another instance) have the same name')
  }
  t.not(piecesOf(['a', 'b']).stored.id, piecesOf(['ab', '']).stored.id, 'where the code goes is part of the name')
  for (const value of ['', 'no header', '[]\n', '[3]\nab', '[1]\nabc', '[-1]\n', '["1"]\na', 'null\n', '{broken\n']) {
    t.equal(CodePieces.fromStored(value), null, `${JSON.stringify(value)} holds no pieces`)
  }
})

t.test('the stored form is the one instances already running write and read', async (t) => {
  // Pinned: Redis keeps pieces under their name (sandbox-pieces:{tenant}:<id>) for an hour,
  // read by every instance of a rolling deployment.
  const value = '[11,1]\nYour code: \n'
  const stored = piecesOf(['Your code: ', '\n']).stored
  t.equal(stored.value, value)
  t.equal(stored.id, createHash('sha256').update(value).digest('base64url'))
  t.equal(CodePieces.fromStored(value)?.splice('042917'), 'Your code: 042917\n')
})
