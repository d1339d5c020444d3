/*
 * `email-otp tenants check [PATH]`: every problem of the tenants file at once, each with its
 * JSON pointer, exit 1 when the service would refuse the file; a good file exits 0.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { writeTenants } from '../helper.js'
import { execForTest as exec } from '../support/processes.js'

const root = new URL('../..', import.meta.url).pathname

interface Outcome { code: number, stdout: string, stderr: string }

async function npmTenants (args: string[], env: Record<string, string> = {}): Promise<Outcome> {
  try {
    const { stdout, stderr } = await exec('npm', ['run', '-s', 'tenants', '--', ...args], { cwd: root, env: { ...process.env, TENANTS_FILE: '', TEMPLATES_DIR: '', ...env }, timeout: 60_000 })
    return { code: 0, stdout, stderr }
  } catch (error) {
    const failed = error as Outcome
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr }
  }
}

t.test('a good file: no problems, exit 0; the path from the argument or TENANTS_FILE', async (t) => {
  const { path } = writeTenants(t)
  t.same(await npmTenants(['check', path]), { code: 0, stdout: `${path}: no problems (2 tenants)\n`, stderr: '' })
  t.same(await npmTenants(['check'], { TENANTS_FILE: path }), { code: 0, stdout: `${path}: no problems (2 tenants)\n`, stderr: '' })
})

t.test('every problem at once, each with its JSON pointer, exit 1', async (t) => {
  const { path } = writeTenants(t, (file) => {
    const [acme, globex] = file.tenants
    acme!.tier = 'gold'
    acme!.keys[1]!.origins = ['app.acme.test']
    acme!.keys[2]!.id = 'acme_live'
    acme!.webhooks = [{ url: 'http://hooks.acme.test/otp', secret: `whsec_${Buffer.alloc(32).toString('base64')}`, events: ['verification.succeeded'] }]
    acme!.templates = { en: { subject: 'Your code {{ code }}' } }
    globex!.captcha = { provider: 'turnstile', secret: 's', minScore: 0.5 }
    globex!.keys[0]!.requireCaptcha = true
    // A tenant the schema refuses has only its schema problems listed (the rest reads it as typed).
    file.tenants.push({ id: 'Initech!', tier: 'standard', keys: [], ttlSeconds: 0 })
  })
  const answer = await npmTenants(['check', path])
  t.equal(answer.code, 1)
  t.equal(answer.stdout, '')
  t.same(answer.stderr.split('\n'), [
    'email-otp tenants: the tenants file would be refused (8 problems):',
    '  /tenants/2/id Expected string to match \'^[a-z0-9][a-z0-9_-]{0,62}$\'',
    '  /tenants/2/ttlSeconds Expected integer to be greater or equal to 1',
    '  /tenants/0/tier names no tier of /tiers',
    '  /tenants/0/webhooks/0/url must be https:// (http:// only on a loopback host, for development)',
    '  /tenants/0/keys/1/origins: only restricted keys have origins',
    '  /tenants/0/keys/2/id appears twice in this tenant (first at /tenants/0/keys/0/id)',
    '  /tenants/1/captcha/minScore: only reCAPTCHA v3 answers a score',
    '  /tenants/0/templates/en/subject (tenant acme, locale en, subject): the subject must not contain the code: subjects show in notifications and mailbox lists',
    ''
  ])
})

t.test('problems of several tenants, the file otherwise good: every problem at once, exit 1', async (t) => {
  const { path } = writeTenants(t, (file) => {
    const [acme, globex] = file.tenants
    // A schema problem in a tenant no longer hides its other problems until the next run.
    acme!.ttlSeconds = 0
    acme!.tier = 'gold'
    acme!.keys[2]!.origins = []
    globex!.captcha = { provider: 'turnstile', secret: 's', minScore: 0.5 }
    globex!.templates = { en: { subject: 'Your code {{ code }}' } }
    file.tenants.push({ id: 'initech', tier: 'standard', keys: [], reviewAddresses: [{ address: 'review@initech.test', codeSha256: '0'.repeat(64), expiresAt: '2999-01-01T00:00:00Z' }] })
  })
  const answer = await npmTenants(['check', path])
  t.equal(answer.code, 1)
  t.equal(answer.stdout, '')
  t.same(answer.stderr.split('\n'), [
    'email-otp tenants: 3 tenants (acme, globex, initech) of 3 tenants would be refused (6 problems):',
    '  /tenants/0/ttlSeconds Expected integer to be greater or equal to 1',
    '  /tenants/0/tier names no tier of /tiers',
    '  /tenants/0/keys/2/origins: a restricted key needs at least one origin',
    '  /tenants/1/captcha/minScore: only reCAPTCHA v3 answers a score',
    '  /tenants/1/templates/en/subject (tenant globex, locale en, subject): the subject must not contain the code: subjects show in notifications and mailbox lists',
    '  /tenants/2/reviewAddresses/0/expiresAt is more than 90 days ahead',
    ''
  ])
})

t.test('a file that cannot be read or parsed: one line, exit 1', async (t) => {
  const dir = t.testdir({ 'broken.json': '{"tiers": ' })
  const missing = await npmTenants(['check', join(dir, 'missing.json')])
  t.same(missing, { code: 1, stdout: '', stderr: `email-otp tenants: the tenants file would be refused: tenants file ${join(dir, 'missing.json')} cannot be read: ENOENT\n` })
  const broken = await npmTenants(['check', join(dir, 'broken.json')])
  t.equal(broken.code, 1)
  t.match(broken.stderr, /^email-otp tenants: the tenants file would be refused: tenants file .*broken\.json is not valid JSON: the text ends before the JSON does at line 1, column 11 \(in \/tiers\)\n$/)
  // A typo, the secret's opening quote left out: the position, never the text (JSON.parse's message quotes its start).
  const secret = `whsec_${Buffer.alloc(32, 5).toString('base64')}`
  const { path } = writeTenants(t, (file) => { file.tenants[1]!.webhooks = [{ url: 'https://hooks.globex.example/otp', secret, events: ['verification.succeeded'] }] })
  writeFileSync(path, readFileSync(path, 'utf8').replace(`"${secret}"`, `${secret}"`))
  const typo = await npmTenants(['check', path])
  t.equal(typo.code, 1)
  t.match(typo.stderr, /is not valid JSON: [^\n]* at line \d+, column \d+ \(in \/tenants\/1\/webhooks\/0\/secret\)\n$/)
  t.notOk(typo.stderr.includes(secret.slice(6, 10)), 'nothing of the secret')
  const extra = await npmTenants(['check', 'a.json', 'b.json'])
  t.same(extra, { code: 2, stdout: '', stderr: 'email-otp tenants: unexpected argument b.json (email-otp tenants --help shows the usage)\n' })
})

t.test('a flood of schema problems is listed up to a bound', async (t) => {
  const { path } = writeTenants(t, (file) => {
    file.tenants[0]!.keys = Array.from({ length: 500 }, (_, index) => ({ id: `k${index}`, kind: 'secret', mode: 'live', sha256: 'not-a-hash' }))
  })
  const answer = await npmTenants(['check', path])
  t.equal(answer.code, 1)
  const lines = answer.stderr.trimEnd().split('\n')
  t.equal(lines[0], 'email-otp tenants: 1 tenant (acme) of 2 tenants would be refused (101 problems):')
  t.match(lines.at(-1), /… and more \(only the first 100 are listed\)$/)
})

t.test('one run lists every problem: the templates folder\'s with the file\'s, a duplicate tenant\'s own, and each entry of a list, each field of a key, brand or CAPTCHA that passes the schema, whatever its siblings hold', async (t) => {
  const secret = `whsec_${Buffer.alloc(32).toString('base64')}`
  const hook = (url: string, events = ['verification.succeeded']): Record<string, unknown> => ({ url, secret, events })
  const review = (address: string, expiresAt: string): Record<string, unknown> => ({ address, codeSha256: '0'.repeat(64), expiresAt })
  const dir = t.testdir({
    'tenants.json': JSON.stringify({
      tiers: { standard: { allowance: 10, window: '1d', sandboxAllowance: 10 } },
      tenants: [
        { id: 'a', tier: 'standard', keys: [], webhooks: [hook('http://one.example/otp'), hook('http://two.example/otp')] },
        { id: 'b', tier: 'standard', keys: [], reviewAddresses: [review('x@b.test', '2999-01-01T00:00:00Z'), review('y@b.test', '2998-01-01T00:00:00Z')] },
        { id: 'c', tier: 'standard', keys: [{ id: 'k', kind: 'restricted', mode: 'live', sha256: 'not-a-hash' }] },
        { id: 'd', tier: 'standard', keys: [], brand: { name: 'x'.repeat(101), from: 'not an address' } },
        { id: 'e', tier: 'standard', keys: [], captcha: { provider: 'turnstile', secret: '', minScore: 0.5 } },
        { id: 'f', tier: 'standard', keys: [], webhooks: [hook('https://ok.example/otp', ['nope']), hook('http://two.example/otp')] },
        { id: 'a', tier: 'gold', keys: [] }
      ]
    })
  })
  const path = join(dir, 'tenants.json')
  const answer = await npmTenants(['check', path, '--templates', dir])
  t.equal(answer.code, 1)
  t.same(answer.stderr.split('\n'), [
    'email-otp tenants: the tenants file would be refused (15 problems):',
    `  the templates folder ${dir} must not be or contain the tenants file's folder (${dir}): tenants' template files get a folder of their own`,
    '  /tenants/6/id appears twice (first at /tenants/0/id)',
    '  /tenants/6/tier names no tier of /tiers',
    '  /tenants/0/webhooks/0/url must be https:// (http:// only on a loopback host, for development)',
    '  /tenants/0/webhooks/1/url must be https:// (http:// only on a loopback host, for development)',
    '  /tenants/1/reviewAddresses/0/expiresAt is more than 90 days ahead',
    '  /tenants/1/reviewAddresses/1/expiresAt is more than 90 days ahead',
    '  /tenants/2/keys/0/sha256 Expected string to match \'^[0-9a-f]{64}$\'',
    '  /tenants/2/keys/0/origins: a restricted key needs at least one origin',
    '  /tenants/3/brand/name Expected string length less or equal to 100',
    '  /tenants/3/brand/from: email must not contain comments or whitespace',
    '  /tenants/4/captcha/secret Expected string length greater or equal to 1',
    '  /tenants/4/captcha/minScore: only reCAPTCHA v3 answers a score',
    '  /tenants/5/webhooks/0/events/0 Expected union value',
    '  /tenants/5/webhooks/1/url must be https:// (http:// only on a loopback host, for development)',
    ''
  ])
})
