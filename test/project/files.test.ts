/*
 * The project files a newcomer copies from: .env.example and compose.yaml must name only
 * variables the service reads, with values it accepts (compose cannot run here, so its
 * configuration is checked against the service's own schema); LICENSE and CHANGELOG agree
 * with package.json.
 */
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { parse as parseDotenv } from 'dotenv'
import t from 'tap'
import { parse } from 'yaml'
import { parseConfig } from '../../lib/config/from-env.js'
import { EnvSchema } from '../../schemas/env.js'

const file = (name: string): string => readFileSync(new URL(`../../${name}`, import.meta.url), 'utf8')
const manifest = JSON.parse(file('package.json')) as { version: string, license: string }
const variables = Object.keys(EnvSchema.properties)

t.test('.env.example lists every variable with its default', async (t) => {
  const set = new Map<string, string>()
  const unset = new Set<string>()
  for (const line of file('.env.example').split('\n')) {
    // A value with shell syntax in it (a regular expression) is single-quoted.
    const assignment = /^([A-Z0-9_]+)=(?:'([^']*)'|(.*))$/.exec(line)
    if (assignment !== null) set.set(assignment[1] ?? '', assignment[2] ?? assignment[3] ?? '')
    const commented = /^# ([A-Z0-9_]+)=$/.exec(line)
    if (commented !== null) unset.add(commented[1] ?? '')
  }
  t.same([...set.keys(), ...unset].sort(), [...variables].sort(), 'each variable once, nothing else')
  for (const [name, schema] of Object.entries(EnvSchema.properties)) {
    const fallback = (schema as { default?: unknown }).default
    if (fallback === undefined) t.ok(unset.has(name), `${name} has no default: shown commented out`)
    else t.equal(set.get(name), String(fallback), `${name} shows its default`)
  }
  t.doesNotThrow(() => parseConfig(Object.fromEntries(set)), 'the values as written are a valid configuration')
  t.equal(spawnSync('sh', ['-n', fileURLToPath(new URL('../../.env.example', import.meta.url))]).status, 0, 'valid shell, for those who source it')
})

/** The schema's defaults as an environment holds them: every variable with a default, nothing else. */
function documentedDefaults (): Record<string, string> {
  return Object.fromEntries(Object.entries(EnvSchema.properties)
    .filter(([, schema]) => (schema as { default?: unknown }).default !== undefined)
    .map(([name, schema]) => [name, String((schema as { default?: unknown }).default)]))
}

t.test('.env.example sourced by sh (set -a; . ./.env.example) exports exactly the documented defaults', async (t) => {
  const dir = fileURLToPath(new URL('../..', import.meta.url))
  // An empty environment, so that only what the file sets can show up; env -0: values may hold anything.
  const environment = (script: string): Map<string, string> => {
    const run = spawnSync('sh', ['-c', script], { cwd: dir, env: { PATH: process.env.PATH }, encoding: 'utf8' })
    t.equal(run.status, 0, `sh -c '${script}' succeeds${run.stderr === '' ? '' : `: ${run.stderr}`}`)
    return new Map(run.stdout.split('\0').filter((entry) => entry !== '').map((entry) => [entry.slice(0, entry.indexOf('=')), entry.slice(entry.indexOf('=') + 1)]))
  }
  const before = environment('env -0')
  const after = environment('set -a; . ./.env.example; env -0')
  const exported = Object.fromEntries([...after].filter(([name, value]) => before.get(name) !== value && name !== '_'))
  t.same(exported, documentedDefaults(), 'every default, byte for byte, and no other variable')
  t.equal(exported.SNS_SIGNING_CERT_URL_PATTERN, String(EnvSchema.properties.SNS_SIGNING_CERT_URL_PATTERN.default), 'the certificate host pattern keeps its backslashes')
})

t.test('.env.example parsed by dotenv yields exactly the documented defaults', async (t) => {
  const parsed = parseDotenv(file('.env.example'))
  t.same(parsed, documentedDefaults(), 'every default, byte for byte, and no other variable')
  t.equal(parsed.SNS_SIGNING_CERT_URL_PATTERN, String(EnvSchema.properties.SNS_SIGNING_CERT_URL_PATTERN.default), 'the certificate host pattern keeps its backslashes')
  t.notOk(new RegExp(parsed.SNS_SIGNING_CERT_URL_PATTERN ?? '').test('https://sns.us-east-1-amazonaws.com/SimpleNotificationService-1.pem'), 'so a look-alike host, which the pattern stripped of its backslashes would admit, is refused')
})

t.test('compose.yaml configures the service with variables it reads and values it accepts', async (t) => {
  const compose = parse(file('compose.yaml')) as { services: Record<string, { environment?: Record<string, string>, image?: string, build?: string }> }
  const service = compose.services['email-otp']
  const environment = service?.environment ?? {}
  t.equal(service?.build, '.', 'built from this repository')
  t.same(Object.keys(environment).filter((name) => !variables.includes(name)), [], 'no variable the service does not read')
  const config = parseConfig(environment)
  t.same(config.mailTransports, ['smtp'])
  t.match(compose.services.redis?.image, /^redis:7\.\d+\.\d+-alpine$/, 'pinned to a release')
  t.match(compose.services.mailpit?.image, /^axllent\/mailpit:v\d+\.\d+\.\d+$/, 'pinned to a release')
  t.equal(new URL(environment.REDIS_URL ?? '').hostname, 'redis', 'REDIS_URL names the redis service')
  t.equal(new URL(environment.SMTP_URL ?? '').hostname, 'mailpit', 'SMTP_URL names the mail catcher')
})

t.test('LICENSE and CHANGELOG agree with package.json', async (t) => {
  t.equal(manifest.license, 'MIT')
  t.match(file('LICENSE'), /^MIT License\n/)
  t.match(file('CHANGELOG.md'), new RegExp(`^## \\[${manifest.version.replaceAll('.', '\\.')}\\] - \\d{4}-\\d{2}-\\d{2}$`, 'm'), 'the current version has its entry')
  const openapi = JSON.parse(file('openapi.json')) as { info: { version: string } }
  t.equal(openapi.info.version, manifest.version, 'openapi.json carries the package version')
})

t.test('Dockerfile: one pinned Node release; the code is root\'s and read-only for the runtime user', async (t) => {
  const dockerfile = file('Dockerfile')
  const lines = dockerfile.split('\n')
  const runtimeFrom = 'FROM $' + '{NODE_IMAGE}'
  t.match(dockerfile, /^ARG NODE_IMAGE=node:\d+\.\d+\.\d+-bookworm-slim$/m, 'an exact Node version')
  t.same(lines.filter((line) => line.startsWith('FROM ')), [`${runtimeFrom} AS build`, runtimeFrom], 'both stages from it')
  const runtime = lines.slice(lines.indexOf(runtimeFrom))
  const copies = runtime.filter((line) => line.startsWith('COPY '))
  t.ok(copies.length >= 4, 'the runtime stage copies the build')
  t.same(copies.filter((line) => /--chown|--chmod/.test(line)), [], 'no copy hands the code to the runtime user')
  // 1000:1000 is the base image's `node` user, numeric so that Kubernetes can check runAsNonRoot.
  t.ok(runtime.findIndex((line) => line === 'USER 1000:1000') > runtime.findIndex((line) => line === copies.at(-1)), 'the service runs as node (1000:1000), after every copy')
  t.notOk(runtime.some((line) => /^RUN .*(chown|chmod)/.test(line)), 'nor does a later step')
  t.match(dockerfile, /^COPY cli cli$/m, 'the command-line program is built into the image (npx email-otp …)')
  t.match(dockerfile, /^CMD \["node", "dist\/server\.js"\]$/m, 'node as the command: signals reach the service')
})
