// The page's script: dispatch and verify straight from the browser with a restricted key,
// which the service accepts only from the origins listed for it. In a bundled app the import
// is `from '@email-otp/client'`.
import { createClient, EmailOtpError } from '/client.js'

const config = JSON.parse(document.getElementById('config').textContent)
const otp = createClient({ baseUrl: config.serviceUrl, apiKey: config.publicKey })

const start = document.getElementById('start')
const finish = document.getElementById('finish')
const status = document.getElementById('status')
let requestId = null
let email = null

function show (text, state) {
  status.textContent = text
  status.dataset.state = state
}

function describe (error) {
  if (!(error instanceof EmailOtpError)) return 'Something went wrong'
  const wait = error.retryAfter === undefined ? '' : ` Try again in ${error.retryAfter} s.`
  return `${error.message} (${error.code}).${wait}`
}

/** The Turnstile widget's token when the page has one; a token is good for one request. */
function captchaToken () {
  if (config.turnstileSiteKey === null) return undefined
  return window.turnstile?.getResponse() || undefined
}

start.addEventListener('submit', async (event) => {
  event.preventDefault()
  const button = start.querySelector('button')
  const token = captchaToken()
  if (config.turnstileSiteKey !== null && token === undefined) return show('Complete the challenge first.', 'error')
  button.disabled = true
  show('Sending…', 'pending')
  try {
    email = new FormData(start).get('email')
    const sent = await otp.dispatch(email, { captchaToken: token, locale: navigator.language })
    requestId = sent.requestId
    finish.hidden = false
    finish.elements.code.focus()
    show(`A code was sent to ${email}.`, 'sent')
  } catch (error) {
    show(describe(error), 'error')
  } finally {
    button.disabled = false
    if (token !== undefined) window.turnstile.reset()
  }
})

finish.addEventListener('submit', async (event) => {
  event.preventDefault()
  const button = finish.querySelector('button')
  button.disabled = true
  try {
    const { receipt } = await otp.verify(requestId, new FormData(finish).get('code'))
    finish.hidden = true
    // The page's word proves nothing to a backend: it sends the receipt and the address, and
    // the backend redeems the receipt for that address (POST /otp/receipts/redeem, secret key)
    // before trusting it (serve.js stands in for it).
    const answer = await fetch('/signup/verified', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, receipt }) })
    const result = await answer.json()
    if (result.verified === true) show('Email address verified.', 'verified')
    else show(`The backend did not accept the verification (${result.error}). Ask for a new code.`, 'error')
  } catch (error) {
    // Every verify uses the code up, right or wrong: a new one is needed.
    finish.hidden = true
    show(`${describe(error)} Ask for a new code.`, 'error')
  } finally {
    button.disabled = false
  }
})
