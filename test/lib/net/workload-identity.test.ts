import t from 'tap'
import { parseXfcc, workloadBucket, workloadIdentity, workloadMatcher } from '../../../lib/net/workload-identity.js'

const xfcc = (value: string) => workloadIdentity('x-forwarded-client-cert', value)

t.test('the XFCC grammar: pairs, elements, quoting, escapes, case-insensitive keys', async (t) => {
  t.same(parseXfcc('By=spiffe://cluster.local/ns/otp/sa/email-otp;Hash=4a6f;URI=spiffe://cluster.local/ns/pay/sa/api'), [[
    ['by', 'spiffe://cluster.local/ns/otp/sa/email-otp'], ['hash', '4a6f'], ['uri', 'spiffe://cluster.local/ns/pay/sa/api']
  ]])
  // Envoy's documented example: Subject quoted because it holds "," and "=".
  t.same(parseXfcc('By=http://frontend.lyft.com;Hash=468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688;Subject="/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client";URI=http://testclient.lyft.com'), [[
    ['by', 'http://frontend.lyft.com'], ['hash', '468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688'],
    ['subject', '/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client'], ['uri', 'http://testclient.lyft.com']
  ]])
  t.same(parseXfcc('By=a;URI=x,By=b;URI=y'), [[['by', 'a'], ['uri', 'x']], [['by', 'b'], ['uri', 'y']]], 'one element per proxy')
  t.same(parseXfcc('Subject="a \\"quoted\\" name, with; separators=";URI=u'), [[['subject', 'a "quoted" name, with; separators='], ['uri', 'u']]], 'escaped quotes and separators inside quotes')
  t.same(parseXfcc('Subject="back\\\\slash";uri=u'), [[['subject', 'back\\slash'], ['uri', 'u']]], 'an escaped backslash')
  t.same(parseXfcc('URI=x, By=b ; URI=y'), [[['uri', 'x']], [['by', 'b'], ['uri', 'y']]], 'spaces around separators (repeated headers joined by node)')
  t.same(parseXfcc('DNS=a.example;DNS=b.example;uRi=u'), [[['dns', 'a.example'], ['dns', 'b.example'], ['uri', 'u']]], 'repeated keys kept, keys lower-cased')
  t.same(parseXfcc('Cert="-----BEGIN%20CERTIFICATE-----%0AMIIB"'), [[['cert', '-----BEGIN%20CERTIFICATE-----%0AMIIB']]])
  t.same(parseXfcc('URI='), [[['uri', '']]], 'an empty value is grammatical')

  for (const [bad, why] of [
    ['', /a key is missing/], ['URI=x,', /a key is missing/], [',URI=x', /where a key starts/], ['URI=x,,URI=y', /where a key starts/],
    ['URI=x;', /a key is missing/], ['URI', /"=" expected/], ['=x', /where a key starts/], ['UR I=x', /"=" expected/],
    ['Subject="open', /unterminated/], ['Subject="a\\', /backslash ends/], ['URI=a"b', /quote inside an unquoted value/],
    ['Subject="a"b;URI=u', /unexpected "b" after a value/], ['URI=caf\u00e9', /non-ASCII/], ['URI=a\u0000b', /control/], ['Subject="a\nb"', /control/]
  ] as const) {
    t.throws(() => parseXfcc(bad), why, JSON.stringify(bad))
  }
})

t.test('the identity: the URI of the last element, exactly one; Linkerd verbatim; bounded', async (t) => {
  t.same(xfcc('By=spiffe://td/ns/gw/sa/ingress;URI=spiffe://td/ns/evil/sa/forged,By=spiffe://td/ns/otp/sa/email-otp;URI=spiffe://td/ns/pay/sa/api'),
    { ok: true, identity: 'spiffe://td/ns/pay/sa/api' }, 'the element the nearest proxy appended wins over what a caller prepended')
  t.same(xfcc('By=spiffe://td/ns/otp/sa/email-otp;Subject="CN=x";URI="spiffe://td/ns/pay/sa/api"'), { ok: true, identity: 'spiffe://td/ns/pay/sa/api' }, 'quoted URI')
  t.match(xfcc('By=a;URI=x;URI=y'), { ok: false, problem: /2 URI values/ }, 'two URIs: ambiguous')
  t.match(xfcc('URI=x,By=a;Hash=h'), { ok: false, problem: /0 URI values/ }, 'the last element without a URI does not fall back to an earlier one')
  t.match(xfcc('URI='), { ok: false, problem: /printable ASCII/ })
  t.match(xfcc('URI="has space"'), { ok: false, problem: /printable ASCII/ })
  t.match(xfcc(`URI=spiffe://td/${'a'.repeat(2048)}`), { ok: false, problem: /1 to 2048/ })
  t.match(xfcc('URI=x;Subject="unterminated'), { ok: false, problem: /unterminated/ })
  t.equal(xfcc(undefined as unknown as string), null, 'absent: no identity')

  t.same(workloadIdentity('l5d-client-id', 'web.payments.serviceaccount.identity.linkerd.cluster.local'), { ok: true, identity: 'web.payments.serviceaccount.identity.linkerd.cluster.local' })
  t.match(workloadIdentity('l5d-client-id', 'a.example, b.example'), { ok: false }, 'two headers joined')
  t.match(workloadIdentity('l5d-client-id', ''), { ok: false })
  t.equal(workloadIdentity('l5d-client-id', undefined), null)
})

t.test('workloads patterns: exact, or one more path segment after /*', async (t) => {
  const allows = workloadMatcher(['spiffe://td/ns/pay/sa/api', 'spiffe://td/ns/jobs/sa/*', 'web.default.serviceaccount.identity.linkerd.cluster.local'])
  t.ok(allows('spiffe://td/ns/pay/sa/api'))
  t.notOk(allows('spiffe://td/ns/pay/sa/api2'), 'exact means exact')
  t.notOk(allows('spiffe://td/ns/pay/sa/ap'))
  t.ok(allows('spiffe://td/ns/jobs/sa/nightly'))
  t.notOk(allows('spiffe://td/ns/jobs/sa/'), 'the segment is not empty')
  t.notOk(allows('spiffe://td/ns/jobs/sa/x/y'), 'one segment, not a subtree')
  t.notOk(allows('spiffe://td/ns/jobsx/sa/nightly'))
  // The segment as MESH_GATEWAY_IDENTITIES asks of an entry's: what a SPIFFE ID can hold.
  for (const last of ['.', '..', 'a%2Fb', 'a?x', 'a#x', 'a:b', 'a@b', 'a b', 'a\u0000', '*']) {
    t.notOk(allows(`spiffe://td/ns/jobs/sa/${last}`), `not ${JSON.stringify(last)}`)
  }
  t.ok(allows('spiffe://td/ns/jobs/sa/a.b_c-9'), 'letters, digits, ".", "-", "_"')
  t.ok(allows('spiffe://td/ns/jobs/sa/...'), 'three dots are a name, as the spec has it')
  t.ok(allows('web.default.serviceaccount.identity.linkerd.cluster.local'))
  t.notOk(allows('web.default.serviceaccount.identity.linkerd.cluster.local.evil'))
})

t.test('a workload bucket is short, inert for Redis Cluster hash tags and unlike any address', async (t) => {
  const bucket = workloadBucket('spiffe://td/ns/{pay}/sa/api')
  t.match(bucket, /^wl:[A-Za-z0-9_-]{43}$/)
  t.not(bucket, workloadBucket('spiffe://td/ns/pay/sa/api'))
})
